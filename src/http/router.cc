// Request router (see router.h).
#include "tollgate/http/router.h"

#include <algorithm>

#include "tollgate/common/assert.h"

namespace tollgate::http {
namespace {

constexpr std::string_view kMethodNames[] = {"GET",    "HEAD",  "POST",   "PUT",
                                               "DELETE", "PATCH", "OPTIONS"};
constexpr int kGet = 0;
constexpr int kHead = 1;

int method_index(std::string_view m) noexcept {
  switch (m.size()) {
    case 3:
      return m == "GET" ? 0 : m == "PUT" ? 3 : -1;
    case 4:
      return m == "HEAD" ? 1 : m == "POST" ? 2 : -1;
    case 5:
      return m == "PATCH" ? 5 : -1;
    case 6:
      return m == "DELETE" ? 4 : -1;
    case 7:
      return m == "OPTIONS" ? 6 : -1;
    default:
      return -1;
  }
}

}  // namespace

void router::add(std::string_view method, std::string_view path, route_id id) {
  add_route(method, path, false, id);
}

void router::add_prefix(std::string_view method, std::string_view prefix, route_id id) {
  add_route(method, prefix, true, id);
}

void router::add_route(std::string_view method, std::string_view path, bool prefix, route_id id) {
  const int m = method_index(method);
  TOLLGATE_CHECK(m >= 0);
  TOLLGATE_CHECK(!path.empty());
  auto& list = prefix ? prefixes_ : exact_;
  auto it =
      std::find_if(list.begin(), list.end(), [&](const resource& r) { return r.path == path; });
  if (it == list.end()) {
    resource r;
    r.path = std::string(path);
    r.prefix = prefix;
    list.push_back(std::move(r));
    it = list.end() - 1;
  }
  TOLLGATE_CHECK(!it->has[m]);  // duplicate registration is a start-up bug
  it->has[m] = true;
  it->ids[m] = id;
  it->allow.clear();
  for (int i = 0; i < kMethods; ++i) {
    if (it->has[i] || (i == kHead && it->has[kGet])) {
      if (!it->allow.empty()) {
        it->allow += ", ";
      }
      it->allow += kMethodNames[i];
    }
  }
  it->allow_line = "Allow: " + it->allow + "\r\n";
  if (prefix) {
    std::stable_sort(prefixes_.begin(), prefixes_.end(), [](const resource& a, const resource& b) {
      return a.path.size() > b.path.size();
    });
  }
}

route_match router::match(std::string_view method, std::string_view path) const noexcept {
  const resource* res = nullptr;
  for (const resource& r : exact_) {
    if (r.path.size() == path.size() && path == r.path) {
      res = &r;
      break;
    }
  }
  if (res == nullptr) {
    for (const resource& r : prefixes_) {
      if (path.size() >= r.path.size() && path.substr(0, r.path.size()) == r.path) {
        res = &r;
        break;
      }
    }
  }
  route_match out;
  if (res == nullptr) {
    out.status = 404;
    return out;
  }
  if (res->prefix) {
    out.rest = path.substr(res->path.size());
  }
  const int m = method_index(method);
  if (m >= 0 && res->has[m]) {
    out.status = 200;
    out.id = res->ids[m];
    return out;
  }
  if (m == kHead && res->has[kGet]) {
    out.status = 200;
    out.id = res->ids[kGet];
    out.head = true;
    return out;
  }
  out.status = 405;
  out.allow = res->allow;
  out.allow_line = res->allow_line;
  return out;
}

}  // namespace tollgate::http
