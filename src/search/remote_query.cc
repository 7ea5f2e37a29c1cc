// remote_query: the gateway's fan-out state (remote_query.h): writes the request bodies, checks
// and copies the answers, and computes the global idf.
//
// Bodies are parsed with simdjson's DOM parser (full validation, so a malformed body is
// rejected as a whole, never half-applied); a search answer is walked a second time with the
// On Demand parser only to cut each story's JSON text out of the body as received.
#include "tollgate/search/remote_query.h"

#include <algorithm>
#include <cmath>

#include "search/fleet_impl.h"
#include "search/fleet_json.h"
#include "tollgate/common/ascii.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search {

using namespace fleet_json;

namespace {

// A search answer, step 1: validates the whole body and takes the total and, per hit, its key
// and id (copied into `chars`, which has room for them; doc = the hit's index). At most `k`
// hits, best first, each strictly after the one before.
bool take_hits(simdjson::dom::parser& dom, std::string_view body, uint32_t k, uint64_t& total,
               std::vector<hit>& out, out_buffer& chars) {
  simdjson::dom::object obj;
  if (!parse_object(dom, body, obj)) {
    return false;
  }
  simdjson::dom::element total_e;
  simdjson::dom::array hits;
  if (obj["total"].get(total_e) || !get_uint(total_e, kMaxDocs, total) ||
      obj["hits"].get_array().get(hits) || hits.size() > k || hits.size() > total) {
    return false;
  }
  for (simdjson::dom::element e : hits) {
    simdjson::dom::object h;
    double key;
    std::string_view id;
    simdjson::dom::object story;
    std::string_view story_id;
    if (e.get_object().get(h) || h["key"].get_double().get(key) || !std::isfinite(key) ||
        h["id"].get_string().get(id) || id.empty() || id.size() > kMaxTermBytes ||
        h["story"].get_object().get(story) || story["id"].get_string().get(story_id) ||
        story_id != id) {
      return false;
    }
    hit x{};
    x.key = key;
    const size_t at = chars.size();
    TOLLGATE_ASSERT(at + id.size() <= chars.capacity());
    chars.append(id);
    x.id = std::string_view(chars.data() + at, id.size());
    x.doc = static_cast<uint32_t>(out.size());
    // answers come best first, each strictly after the one before
    if (!out.empty() && !hit_better(out.back(), x)) {
      return false;
    }
    out.push_back(x);
  }
  return true;
}

// A search answer, step 2: cuts each of the `hits` stories' JSON out of the body as received,
// appending it to `chars` (which has room) and its place to `spans`.
bool cut_stories(simdjson::ondemand::parser& od, std::string_view body, size_t hits,
                 out_buffer& chars, std::vector<std::pair<uint32_t, uint32_t>>& spans) {
  simdjson::ondemand::document doc;
  simdjson::ondemand::array od_hits;
  if (od.iterate(simdjson::padded_string_view(body.data(), body.size(),
                                              body.size() + simdjson::SIMDJSON_PADDING))
          .get(doc) ||
      doc["hits"].get_array().get(od_hits)) {
    return false;
  }
  for (auto item : od_hits) {
    simdjson::ondemand::object h;
    simdjson::ondemand::object story;
    std::string_view raw;
    if (item.get_object().get(h) || h["story"].get_object().get(story) ||
        story.raw_json().get(raw) || spans.size() >= hits) {
      return false;
    }
    raw = ascii::trim(raw);
    const size_t at = chars.size();
    TOLLGATE_ASSERT(at + raw.size() <= chars.capacity());
    chars.append(raw);
    spans.emplace_back(static_cast<uint32_t>(at), static_cast<uint32_t>(raw.size()));
  }
  return spans.size() == hits;
}

}  // namespace

remote_query::remote_query(uint32_t remotes) : remotes_(remotes), st_(std::make_unique<state>()) {
  arg_chars_.reserve(4096);
  story_id_.reserve(256);
  st_->term_chars.reserve(2048);
  st_->terms.reserve(kMaxFleetTerms);
  st_->phrases.reserve(kMaxFleetTerms / 2);
  st_->phrase_terms.reserve(kMaxFleetTerms);
  st_->local_df.reserve(kMaxFleetTerms);
  st_->df.reserve(kMaxFleetTerms);
  st_->idf.reserve(kMaxFleetTerms);
  st_->answers.resize(remotes);
  for (remote_reply& a : st_->answers) {
    a.df.reserve(kMaxFleetTerms);
    a.chars.reserve(4096);
  }
}

remote_query::~remote_query() = default;

void remote_query::start_search(const backend& b, const query_args& args) {
  story_ = false;
  story_id_.clear();
  // copy the strings first, then point the views at the copy (it no longer moves)
  arg_chars_.clear();
  arg_chars_.append(args.query);
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    arg_chars_.append(args.tags[i]);
  }
  args_ = args;
  size_t at = 0;
  args_.query = std::string_view(arg_chars_.data() + at, args.query.size());
  at += args.query.size();
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    args_.tags[i] = std::string_view(arg_chars_.data() + at, args.tags[i].size());
    at += args.tags[i].size();
  }
  state& st = *st_;
  plan_terms(args_.query, st.term_chars, st.terms, st.phrases, st.phrase_terms, st.alone);
  st.k = std::min<uint32_t>(args.offset + args.limit, kMaxK);
  st.phrase_df = needs_phrase_df(st.alone, st.phrases.size(), args.sort);
  st.local_df.assign(st.terms.size() + (st.phrase_df ? st.phrases.size() : 0), 0);
  st.local_ok.assign(b.local_count(), 0);
  query_plan df_plan{};
  df_plan.terms = st.terms;
  if (st.phrase_df) {
    df_plan.phrases = st.phrases;
    df_plan.phrase_terms = st.phrase_terms;
  }
  if (!st.local_scratch) {
    st.local_scratch = b.make_scratch();
  }
  b.add_local_doc_freqs(df_plan, *st.local_scratch, st.local_df.data(), st.local_ok.data());
  st.local_stats = b.local_stats();
  st.df_done = false;
  st.df.clear();
  st.idf.clear();
  st.phrase_idf.clear();
  st.avgdl = 0;
  st.docs = 0;
  for (remote_reply& a : st.answers) {
    a.reset();
  }
}

void remote_query::start_story(std::string_view id) {
  story_ = true;
  story_id_.assign(id);
  args_ = query_args{};
  arg_chars_.clear();
  st_->df_done = false;
  for (remote_reply& a : st_->answers) {
    a.reset();
  }
}

void remote_query::write_df_body(out_buffer& out) const {
  json_out j(out, false);
  const state& st = *st_;
  j.raw("{\"terms\":");
  write_terms(j, st.terms);
  if (st.phrase_df) {
    write_phrases(out, st.phrases, st.phrase_terms);
  }
  j.raw("}");
}

bool remote_query::on_df(uint32_t r, int status, std::string_view body) {
  if (story_ || r >= remotes_ || st_->df_done || st_->answers[r].df_ok || status != 200) {
    return false;
  }
  remote_reply& a = st_->answers[r];
  simdjson::dom::object obj;
  if (!parse_object(st_->dom, body, obj)) {
    return false;
  }
  unsigned seen = 0;
  shard_stats stats;
  a.df.clear();
  const size_t want_df = st_->local_df.size();
  const fields_read read = read_fields(
      obj, seen,
      [&a, &stats, want_df](std::string_view key, simdjson::dom::element v, bool& ok) -> unsigned {
        if (key == "docs") {
          ok = get_uint(v, kMaxDocs, stats.docs);
          return 1;
        }
        if (key == "title_tokens") {
          ok = get_uint(v, kMaxTokens, stats.title_tokens);
          return 2;
        }
        if (key == "text_tokens") {
          ok = get_uint(v, kMaxTokens, stats.text_tokens);
          return 4;
        }
        if (key == "df") {
          ok = get_array(v, want_df, a.df,
                         [](simdjson::dom::element e, uint64_t& n) {
                           return get_uint(e, kMaxDocs, n);
                         }) &&
               a.df.size() == want_df;
          return 8;
        }
        return 0;
      });
  if (!read) {
    a.df.clear();
    return false;
  }
  if (seen != 15) {
    a.df.clear();
    return false;
  }
  for (uint64_t v : a.df) {
    if (v > stats.docs) {
      a.df.clear();
      return false;
    }
  }
  a.stats = stats;
  a.df_ok = true;
  return true;
}

void remote_query::finish_df() {
  state& st = *st_;
  if (story_ || st.df_done) {
    return;
  }
  st.df.assign(st.local_df.begin(), st.local_df.end());
  shard_stats all = st.local_stats;
  for (const remote_reply& a : st.answers) {
    if (!a.df_ok) {
      continue;
    }
    all += a.stats;
    for (size_t i = 0; i < st.df.size(); ++i) {
      st.df[i] += a.df[i];
    }
  }
  st.docs = all.docs;
  score_weights(st.docs, st.alone, st.df, st.phrases.size(), st.phrase_df, st.idf, st.phrase_idf);
  st.avgdl = average_length(all);
  st.df_done = true;
}

bool remote_query::needs_df() const noexcept {
  // every relevance ranking: even one term's order depends on the fleet's average length
  return !story_ && args_.sort == sort_order::relevance;
}

void remote_query::skip_df() {
  state& st = *st_;
  if (story_ || st.df_done) {
    return;
  }
  st.df.assign(st.local_df.begin(), st.local_df.end());
  st.docs = st.local_stats.docs;
  st.idf.assign(st.terms.size(), 1.0);
  st.phrase_idf.clear();
  st.avgdl = 0;
  for (remote_reply& a : st.answers) {
    a.df_ok = true;  // phase 2 may ask every remote
  }
  st.df_done = true;
}

bool remote_query::df_ok(uint32_t r) const noexcept {
  return !story_ && r < remotes_ && st_->df_done && st_->answers[r].df_ok;
}

void remote_query::write_search_body(out_buffer& out) const {
  const state& st = *st_;
  json_out j(out, false);
  j.raw("{\"terms\":");
  write_terms(j, st.terms);
  j.raw(",\"idf\":[");
  append_list(out, std::span<const double>(st.idf));
  out.push_back(']');
  write_phrases(out, st.phrases, st.phrase_terms);
  if (!st.phrase_idf.empty()) {
    out.append(",\"phrase_idf\":[");
    append_list(out, std::span<const double>(st.phrase_idf));
    out.push_back(']');
  }
  if (st.avgdl > 0) {
    out.append(",\"avgdl\":");
    append_double(out, st.avgdl);
  }
  j.raw(",\"tags\":");
  write_terms(j, std::span<const std::string_view>(args_.tags.data(), args_.tag_count));
  j.raw(",\"since\":");
  append_int(out, args_.since);
  j.raw(",\"until\":");
  append_int(out, args_.until);
  j.raw(args_.sort == sort_order::date ? ",\"sort\":\"date\",\"k\":"
                                       : ",\"sort\":\"relevance\",\"k\":");
  append_uint(out, st.k);
  j.raw("}");
}

bool remote_query::on_search(uint32_t r, int status, std::string_view body) {
  if (story_ || r >= remotes_ || !st_->df_done || !st_->answers[r].df_ok ||
      st_->answers[r].search_ok || status != 200) {
    return false;
  }
  state& st = *st_;
  remote_reply& a = st.answers[r];
  a.hits.clear();
  a.spans.clear();
  a.chars.clear();
  // ids and stories are disjoint pieces of the body (ids unescaped, never longer): the copy
  // fits in body.size() bytes, so the views taken below never move
  a.chars.reserve(body.size());
  uint64_t total = 0;
  if (!take_hits(st.dom, body, st.k, total, a.hits, a.chars) ||
      !cut_stories(st.od, body, a.hits.size(), a.chars, a.spans)) {
    a.hits.clear();
    a.spans.clear();
    a.chars.clear();
    return false;
  }
  a.total = total;
  a.search_ok = true;
  return true;
}

bool remote_query::on_story(uint32_t r, int status, std::string_view body) {
  if (!story_ || r >= remotes_ || st_->answers[r].story != remote_reply::story_state::unanswered) {
    return false;
  }
  remote_reply& a = st_->answers[r];
  if (status == 404) {
    a.story = remote_reply::story_state::absent;
    return true;
  }
  if (status != 200) {
    return false;
  }
  simdjson::dom::object obj;
  std::string_view id;
  if (!parse_object(st_->dom, body, obj) || obj["id"].get_string().get(id) || id != story_id_) {
    return false;
  }
  const std::string_view raw = ascii::trim(body);
  a.chars.clear();
  a.chars.append(raw);
  a.spans.clear();
  a.spans.emplace_back(0, static_cast<uint32_t>(raw.size()));
  a.story = remote_reply::story_state::found;
  return true;
}

std::span<const std::string_view> remote_query::terms() const noexcept {
  return story_ ? std::span<const std::string_view>()
                : std::span<const std::string_view>(st_->terms);
}

std::span<const double> remote_query::idf() const noexcept {
  return st_->df_done ? std::span<const double>(st_->idf) : std::span<const double>();
}

std::span<const double> remote_query::phrase_idf() const noexcept {
  return st_->df_done ? std::span<const double>(st_->phrase_idf) : std::span<const double>();
}

double remote_query::avgdl() const noexcept { return st_->df_done ? st_->avgdl : 0.0; }

bool remote_query::matches(const query_args& args) const noexcept {
  if (story_ || args.query != args_.query || args.limit != args_.limit ||
      args.offset != args_.offset || args.since != args_.since || args.until != args_.until ||
      args.sort != args_.sort || args.tag_count != args_.tag_count) {
    return false;
  }
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    if (args.tags[i] != args_.tags[i]) {
      return false;
    }
  }
  return true;
}

bool remote_query::matches_story(std::string_view id) const noexcept {
  return story_ && id == story_id_;
}

}  // namespace tollgate::search
