// The load generator's request mix: which requests to send, with which keys and queries, and
// how each is rendered into HTTP/1.1 bytes. Everything variable (keys, queries, header block)
// is pre-rendered once; rendering a request then only copies pieces and writes the id.
//
// `workload` is immutable after build() and shared by all threads; `picker` is core-local.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "check.h"

namespace tollgate::loadgen {

/// One entry of the mix: a request kind, a path for `get`, and a relative weight.
struct request_spec {
  req_kind kind = req_kind::get;
  std::string path;  ///< for get: the target; others use the workload's paths
  std::uint32_t weight = 1;
};

/// Parses "KIND[@WEIGHT]" where KIND is call | rest | init | list | get:/PATH.
/// Returns false and sets `err` on a bad spec.
bool parse_request_spec(std::string_view text, request_spec& out, std::string& err);

/// Everything the mix needs to render requests.
struct workload_config {
  std::string host_header = "127.0.0.1";
  std::string mcp_path = "/mcp";
  std::string rest_path = "/v1/stories";
  std::string protocol_version = "2025-06-18";  ///< empty: no MCP-Protocol-Version header
  std::vector<std::string> keys;                ///< empty: no Authorization header
  double zipf_s = 1.0;                          ///< key popularity skew (0 = uniform)
  std::vector<std::string> queries;
  double query_zipf_s = 0;  ///< query popularity skew: query i has weight 1/(i+1)^s (0 uniform)
  int limit = 0;            ///< search `limit` argument; 0 = omitted
  std::vector<std::string> extra_headers;  ///< "Name: value" lines
  bool fixed_id = false;                   ///< every request id 1 (byte-identical bodies)
  int expect_status = 200;                 ///< for get specs
  std::vector<request_spec> mix;
};

/// Pre-rendered request pieces. Thread-safe (read-only after build()).
class workload {
 public:
  /// Validates and pre-renders. Returns false with a message in `err` on a bad config.
  bool build(const workload_config& cfg, std::string& err);

  std::size_t spec_count() const noexcept { return specs_.size(); }
  const request_spec& spec(std::size_t i) const noexcept { return specs_[i]; }
  std::size_t key_count() const noexcept { return auth_lines_.size(); }
  std::size_t query_count() const noexcept { return json_queries_.size(); }
  int expect_status() const noexcept { return expect_status_; }
  bool fixed_id() const noexcept { return fixed_id_; }

  /// Appends one complete request for spec `spec_i`, key `key_i`, query `query_i` and
  /// JSON-RPC id `id` to `out`. Allocation-free once `out` and `body_tmp` have grown.
  void render(std::string& out, std::string& body_tmp, std::size_t spec_i, std::size_t key_i,
              std::size_t query_i, std::int64_t id) const;

  /// Cumulative Zipf weights over the keys (for picker).
  const std::vector<double>& key_cdf() const noexcept { return key_cdf_; }
  /// Cumulative Zipf weights over the queries; empty when they are drawn uniformly.
  const std::vector<double>& query_cdf() const noexcept { return query_cdf_; }
  /// Cumulative weights over the specs.
  const std::vector<std::uint64_t>& spec_cdf() const noexcept { return spec_cdf_; }

 private:
  std::vector<request_spec> specs_;
  std::vector<std::uint64_t> spec_cdf_;
  std::vector<std::string> auth_lines_;  ///< "Authorization: Bearer K\r\n"
  std::vector<double> key_cdf_;
  std::vector<double> query_cdf_;
  std::vector<std::string> json_queries_;  ///< JSON-escaped (no quotes)
  std::vector<std::string> url_queries_;   ///< percent-encoded
  std::string mcp_head_;                   ///< "POST /mcp HTTP/1.1\r\nHost..." up to auth
  std::string get_common_;                 ///< "Host..." headers for GETs
  std::string rest_prefix_;                ///< "GET /v1/stories?q="
  std::string init_params_;
  std::string limit_arg_;  ///< ",\"limit\":N" or empty
  int expect_status_ = 200;
  bool fixed_id_ = false;
};

/// Random choices for one thread: which spec, key and query. Core-local.
class picker {
 public:
  picker(const workload& w, std::uint64_t seed)
      : w_(&w), state_(seed ? seed : 0x9e3779b97f4a7c15) {}

  std::size_t spec();
  std::size_t key();
  std::size_t query();

 private:
  std::uint64_t next() noexcept;  ///< splitmix64
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  const workload* w_;
  std::uint64_t state_;
};

/// Reads non-empty, non-comment lines of a file. False with `err` set when unreadable.
bool read_lines(const std::string& path, std::vector<std::string>& out, std::string& err);

}  // namespace tollgate::loadgen
