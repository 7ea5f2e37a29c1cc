// Request router: (method, exact path) or (method, path prefix) → a small route id.
//
// Routes are registered at start-up (registration allocates); match() allocates nothing.
// Resolution, for a request path:
//   1. an exact path registered for any method wins over prefixes; else the longest matching
//      prefix is the path's resource;
//   2. no resource → 404;
//   3. the resource has a route for the method → that route id (HEAD falls back to the GET route,
//      with match.head set so the answer carries no body);
//   4. otherwise → 405 with `allow` listing the resource's methods ("GET, HEAD, POST").
// Methods are GET, HEAD, POST, PUT, DELETE, PATCH and OPTIONS; any other request method gets 405
// on a known path. Thread-safe for match() (const, no shared mutation) once registration, which
// is single-threaded at start-up, has finished.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate::http {

using route_id = uint16_t;

struct route_match {
  int status = 404;        ///< 200 (matched), 404 or 405
  route_id id = 0;         ///< status 200: the registered id
  bool head = false;       ///< a HEAD request served by the GET route: send no body
  std::string_view allow;  ///< status 405: the Allow header value (owned by the router)
  /// status 405: "Allow: <allow>\r\n", ready to pass as extra header lines to the writer.
  std::string_view allow_line;
  std::string_view rest;  ///< prefix routes: the path after the prefix ("123" for /v1/stories/123)
};

class router {
 public:
  /// Registers `method` on exactly `path`. Aborts on an unsupported method or a duplicate.
  void add(std::string_view method, std::string_view path, route_id id);
  /// Registers `method` on every path starting with `prefix` (e.g. "/v1/stories/").
  void add_prefix(std::string_view method, std::string_view prefix, route_id id);

  /// Resolves a request. The views in the result point into `path` (rest) or into the router
  /// (allow, allow_line) and stay valid while both live and no route is added.
  route_match match(std::string_view method, std::string_view path) const noexcept;

 private:
  static constexpr int kMethods = 7;
  struct resource {
    std::string path;
    bool prefix = false;
    bool has[kMethods] = {};
    route_id ids[kMethods] = {};
    std::string allow;
    std::string allow_line;
  };
  void add_route(std::string_view method, std::string_view path, bool prefix, route_id id);
  std::vector<resource> exact_;
  std::vector<resource> prefixes_;  ///< longest first
};

}  // namespace tollgate::http
