// shard_node: a shard node's answers to the fleet requests (shard_node.h, fleet_wire.h).
//
// Bodies are parsed with simdjson's DOM parser (full validation, so a malformed body is
// rejected as a whole, never half-applied). Unknown fields are ignored (newer gateways).
#include "tollgate/search/shard_node.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

#include "search/fleet_impl.h"
#include "search/fleet_json.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search {

namespace {

using namespace fleet_json;

int write_error(out_buffer& out, int status, std::string_view code, std::string_view message) {
  json_out j(out, false);
  j.raw("{\"code\":");
  j.string(code);
  if (!message.empty()) {
    j.raw(",\"message\":");
    j.string(message);
  }
  j.raw("}");
  return status;
}

int bad_request(out_buffer& out, std::string_view message) {
  return write_error(out, 400, "invalid_request", message);
}

// The 400 for a field read_fields() refused.
int bad_field(out_buffer& out, const fields_read& r) {
  return bad_request(out, r.why == fields_read::problem::twice
                              ? fmt::format("{} appears twice.", r.key)
                              : fmt::format("{} has a wrong type or value.", r.key));
}

int not_found(out_buffer& out) { return write_error(out, 404, "not_found", {}); }

int unavailable(out_buffer& out) {
  return write_error(out, 503, "unavailable", "No local shard answered.");
}

// The checks both requests make on terms and phrases; empty when they hold, else the message.
std::string_view check_terms_and_phrases(const fleet_scratch& f) {
  for (size_t i = 1; i < f.terms.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (f.terms[i] == f.terms[j]) {
        return "terms must be distinct.";
      }
    }
  }
  for (uint32_t t : f.phrase_terms) {
    if (t >= f.terms.size()) {
      return "phrase_terms must index terms.";
    }
  }
  for (const phrase_span& p : f.phrases) {
    if (static_cast<uint64_t>(p.first) + p.count > f.phrase_terms.size()) {
      return "phrases must lie within phrase_terms.";
    }
  }
  return {};
}

// ---- shard node ----

// POST df: {"terms":[...]} plus, when the gateway ranks by phrases too, "phrases" and
// "phrase_terms" (as in a search). Answers the node's corpus figures and one document frequency
// per term, then one per phrase.
int serve_df(const backend& b, scratch& s, fleet_scratch& f, std::string_view body,
             out_buffer& out) {
  simdjson::dom::object obj;
  if (!parse_object(f.dom, body, obj)) {
    return bad_request(out, "The body must be a JSON object.");
  }
  unsigned seen = 0;
  f.terms.clear();
  f.phrases.clear();
  f.phrase_terms.clear();
  const fields_read read = read_fields(
      obj, seen, [&f](std::string_view key, simdjson::dom::element v, bool& ok) -> unsigned {
        if (key == "terms") {
          ok = get_strings(v, kMaxFleetTerms, kMaxTermBytes, f.terms);
          return 1;
        }
        if (key == "phrases") {
          ok = get_phrases(v, f.phrases);
          return 2;
        }
        if (key == "phrase_terms") {
          ok = get_indices(v, f.phrase_terms);
          return 4;
        }
        return 0;
      });
  if (!read) {
    return bad_field(out, read);
  }
  if ((seen & 1) == 0) {
    return bad_request(out, "terms is required.");
  }
  if (const std::string_view why = check_terms_and_phrases(f); !why.empty()) {
    return bad_request(out, why);
  }
  f.df.assign(f.terms.size() + f.phrases.size(), 0);
  query_plan plan{};
  plan.terms = f.terms;
  plan.phrases = f.phrases;
  plan.phrase_terms = f.phrase_terms;
  if (!b.add_local_doc_freqs(plan, s, f.df.data())) {
    return unavailable(out);
  }
  const shard_stats st = b.local_stats();
  out.append("{\"docs\":");
  append_uint(out, st.docs);
  out.append(",\"title_tokens\":");
  append_uint(out, st.title_tokens);
  out.append(",\"text_tokens\":");
  append_uint(out, st.text_tokens);
  out.append(",\"df\":[");
  append_list(out, std::span<const uint64_t>(f.df));
  out.append("]}");
  return 200;
}

// The search request's fields, one bit each (a field sent twice is refused).
enum search_field : unsigned {
  f_terms = 1,
  f_idf = 2,
  f_phrases = 4,
  f_phrase_terms = 8,
  f_tags = 16,
  f_since = 32,
  f_until = 64,
  f_sort = 128,
  f_k = 256,
  f_phrase_idf = 512,
  f_avgdl = 1024
};

// Reads the search request's field `key` into `f` and `plan`: returns its bit, 0 for an unknown
// field (ignored: newer gateways); `ok` turns false when the value has a wrong type or range.
unsigned read_search_field(std::string_view key, simdjson::dom::element v, fleet_scratch& f,
                           query_plan& plan, bool& ok) {
  if (key == "terms") {
    ok = get_strings(v, kMaxFleetTerms, kMaxTermBytes, f.terms);
    return f_terms;
  }
  if (key == "idf") {
    ok = get_weights(v, kMaxFleetTerms, f.idf);
    return f_idf;
  }
  if (key == "phrases") {
    ok = get_phrases(v, f.phrases);
    return f_phrases;
  }
  if (key == "phrase_terms") {
    ok = get_indices(v, f.phrase_terms);
    return f_phrase_terms;
  }
  if (key == "phrase_idf") {
    ok = get_weights(v, kMaxFleetTerms / 2, f.phrase_idf);
    return f_phrase_idf;
  }
  if (key == "avgdl") {
    ok = !v.get_double().get(plan.avgdl) && std::isfinite(plan.avgdl) && plan.avgdl > 0;
    return f_avgdl;
  }
  if (key == "tags") {
    ok = get_strings(v, max_tags, kMaxTagBytes, f.tags);
    return f_tags;
  }
  if (key == "since" || key == "until") {
    const unsigned bit = key == "since" ? f_since : f_until;
    int64_t t = 0;
    ok = !v.get_int64().get(t);
    (bit == f_since ? plan.since : plan.until) = t;
    return bit;
  }
  if (key == "sort") {
    std::string_view so;
    ok = !v.get_string().get(so);
    std::optional<sort_order> parsed = ok ? parse_sort(so) : std::nullopt;
    ok = parsed.has_value();
    plan.sort = parsed.value_or(sort_order::relevance);
    return f_sort;
  }
  if (key == "k") {
    uint64_t k = 0;
    ok = get_uint(v, kMaxK, k) && k >= 1;
    plan.k = static_cast<uint32_t>(k);
    return f_k;
  }
  return 0;
}

// {"total":N,"hits":[{"key":K,"id":"...","story":{...}},...]}
void write_search_answer(const backend& b, const search_result& r, out_buffer& out) {
  json_out j(out, false);
  out.append("{\"total\":");
  append_uint(out, r.total);
  out.append(",\"hits\":[");
  bool first = true;
  for (const hit& h : r.stories) {
    out.append(first ? "{\"key\":" : ",{\"key\":");
    first = false;
    append_double(out, h.key);
    out.append(",\"id\":");
    j.string(h.id);
    out.append(",\"story\":");
    b.render_hit(h, j);
    out.push_back('}');
  }
  out.append("]}");
}

int serve_search(const backend& b, scratch& s, fleet_scratch& f, std::string_view body,
                 out_buffer& out) {
  simdjson::dom::object obj;
  if (!parse_object(f.dom, body, obj)) {
    return bad_request(out, "The body must be a JSON object.");
  }
  unsigned seen = 0;
  query_plan plan{};
  plan.since = std::numeric_limits<int64_t>::min();
  plan.until = std::numeric_limits<int64_t>::max();
  f.terms.clear();
  f.idf.clear();
  f.phrases.clear();
  f.phrase_terms.clear();
  f.phrase_idf.clear();
  f.tags.clear();
  const fields_read read =
      read_fields(obj, seen, [&f, &plan](std::string_view key, simdjson::dom::element v, bool& ok) {
        return read_search_field(key, v, f, plan, ok);
      });
  if (!read) {
    return bad_field(out, read);
  }
  constexpr unsigned required = f_terms | f_idf | f_sort | f_k;
  if ((seen & required) != required) {
    return bad_request(out, "terms, idf, sort and k are required.");
  }
  if (f.idf.size() != f.terms.size()) {
    return bad_request(out, "idf must have one entry per term.");
  }
  if ((seen & f_phrase_idf) != 0 && f.phrase_idf.size() != f.phrases.size()) {
    return bad_request(out, "phrase_idf must have one entry per phrase.");
  }
  if (const std::string_view why = check_terms_and_phrases(f); !why.empty()) {
    return bad_request(out, why);
  }
  f.point(plan);
  plan.tags = f.tags;
  auto r = b.search_plan(plan, s);
  if (!r) {
    return unavailable(out);
  }
  write_search_answer(b, *r, out);
  return 200;
}

int serve_story(const backend& b, std::string_view id, out_buffer& out, pending_read* nowait) {
  if (id.empty()) {
    return not_found(out);
  }
  auto ref = b.find_story(id);
  if (!ref) {
    return ref.error() == errc::not_found ? not_found(out) : unavailable(out);
  }
  json_out j(out, false);
  if (auto r = b.render_story(*ref, j, nullptr, nowait); !r) {
    if (r.error() == errc::would_block) {
      return 0;  // nothing written: asked again once the bytes are in
    }
    // nothing written: a damaged story is this node's fault, answered as not answering
    return write_error(out, 503, "unavailable", message(r.error()));
  }
  return 200;
}

}  // namespace

int serve_fleet_request(const backend& b, scratch& s, std::string_view method,
                        std::string_view path, std::string_view body, out_buffer& out,
                        pending_read* nowait) {
  if (!s.fleet_) {
    s.fleet_ = std::make_unique<fleet_scratch>();
  }
  fleet_scratch& f = *s.fleet_;
  if (path == fleet_wire::df_path && method == "POST") {
    return serve_df(b, s, f, body, out);
  }
  if (path == fleet_wire::search_path && method == "POST") {
    return serve_search(b, s, f, body, out);
  }
  if (path.starts_with(fleet_wire::story_prefix) && method == "GET") {
    return serve_story(b, path.substr(fleet_wire::story_prefix.size()), out, nowait);
  }
  return not_found(out);
}

}  // namespace tollgate::search
