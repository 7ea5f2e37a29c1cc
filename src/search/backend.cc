// backend: query planning, fan-out over shards, deterministic merge, payload rendering.
#include "tollgate/search/backend.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "search/fleet_impl.h"
#include "search/local_shard.h"
#include "tollgate/common/assert.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {

std::string_view message(errc e) noexcept {
  switch (e) {
    case errc::not_found:
      return "No story has this id. Check the id, for example from the results of "
             "search_stories.";
    case errc::unavailable:
      return "The search backend is temporarily unavailable: no shard answered. This is an "
             "outage, not an empty result; retry after retry_after_secs.";
    case errc::unreadable:
      return "This story's stored text cannot be read: the server's index is damaged. This is "
             "a fault of the server, not a missing story; other stories are unaffected.";
    case errc::would_block:  // never answered: the caller reads the bytes and asks again
      return "This story's text is being read from disk; retry after retry_after_secs.";
  }
  return "Unknown error.";
}

std::string_view code(errc e) noexcept {
  switch (e) {
    case errc::not_found:
      return "not_found";
    case errc::unavailable:
    case errc::unreadable:
    case errc::would_block:
      return "unavailable";
  }
  return "internal";
}

scratch::scratch(size_t shard_count, size_t local_count)
    : answers_(std::min(shard_count, local_count)),
      answered_(shard_count),
      heads_(shard_count),
      lists_(shard_count),
      ws_(std::make_unique<shard_workspace>()) {
  token_chars_.reserve(2048);
  terms_.reserve(256);
  idf_.reserve(256);
  df_.reserve(256);
  phrases_.reserve(128);
  phrase_terms_.reserve(256);
  phrase_idf_.reserve(128);
  alone_.reserve(256);
  for (shard_answer& a : answers_) {
    a.hits.reserve(kMaxK);
  }
  merged_.reserve(kMaxK);
}

scratch::~scratch() = default;

backend::backend(std::vector<std::unique_ptr<shard_source>> local, uint32_t remote_slots)
    : shards_(std::move(local)), remote_(remote_slots) {
  for (const auto& s : shards_) {
    global_ += s->stats();
  }
  // Shards finalize concurrently (each may also split its terms over threads): one shard's
  // serial steps and uneven thread ranges then overlap another's work.
  const size_t threads = std::min<size_t>(shards_.size(), usable_cpus());
  if (threads <= 1) {
    for (auto& s : shards_) {
      s->finalize(global_);
    }
  } else {
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) {
      pool.emplace_back([this, t, threads] {
        for (size_t i = t; i < shards_.size(); i += threads) {
          shards_[i]->finalize(global_);
        }
      });
    }
    for (std::thread& th : pool) {
      th.join();
    }
  }
}

backend::~backend() = default;

std::unique_ptr<scratch> backend::make_scratch() const {
  return std::make_unique<scratch>(shard_count(), shards_.size());
}

namespace {

// Adds a distinct term (copied into the character buffer) and returns its index.
uint32_t add_term(std::string_view tok, out_buffer& chars, std::vector<std::string_view>& terms) {
  for (size_t i = 0; i < terms.size(); ++i) {
    if (terms[i] == tok) {
      return static_cast<uint32_t>(i);
    }
  }
  // chars has room reserved up front, so earlier views stay valid
  TOLLGATE_ASSERT(chars.size() + tok.size() <= chars.capacity());
  size_t at = chars.size();
  chars.append(tok);
  terms.emplace_back(chars.data() + at, tok.size());
  return static_cast<uint32_t>(terms.size() - 1);
}

}  // namespace

void plan_terms(std::string_view query, out_buffer& chars, std::vector<std::string_view>& terms,
                std::vector<phrase_span>& phrases, std::vector<uint32_t>& phrase_terms,
                std::vector<uint8_t>& alone) {
  // terms outside quotes are single terms; quoted runs are phrases (a quoted single word is a
  // term like any other).
  chars.clear();
  chars.reserve(query.size() + 8);  // tokens never outgrow their source text
  terms.clear();
  phrases.clear();
  phrase_terms.clear();
  alone.clear();
  std::string_view q = query;
  bool in_quotes = false;
  while (!q.empty()) {
    size_t quote = q.find('"');
    std::string_view seg = q.substr(0, quote);
    token_stream ts(seg);
    std::string_view tok;
    uint32_t first = static_cast<uint32_t>(phrase_terms.size());
    while (ts.next(tok)) {
      uint32_t t = add_term(tok, chars, terms);
      alone.resize(terms.size(), 0);
      if (in_quotes) {
        phrase_terms.push_back(t);
      } else if (alone[t] < UINT8_MAX) {
        ++alone[t];
      }
    }
    if (in_quotes) {
      uint32_t count = static_cast<uint32_t>(phrase_terms.size()) - first;
      if (count >= 2) {
        phrases.push_back({first, count});
      } else {
        if (count == 1 && alone[phrase_terms[first]] < UINT8_MAX) {
          ++alone[phrase_terms[first]];
        }
        phrase_terms.resize(first);
      }
    }
    if (quote == std::string_view::npos) {
      break;
    }
    q.remove_prefix(quote + 1);
    in_quotes = !in_quotes;
  }
}

double bm25_idf(uint64_t docs, uint64_t df) noexcept {
  // FTS5's: (N - n + 0.5) in double from the integers, the same clamp for common units
  const double idf = std::log((static_cast<double>(docs) - static_cast<double>(df) + 0.5) /
                              (static_cast<double>(df) + 0.5));
  return idf <= 0.0 ? 1e-6 : idf;
}

bool needs_phrase_df(std::span<const uint8_t> alone, size_t phrases, sort_order sort) noexcept {
  if (sort != sort_order::relevance || phrases == 0) {
    return false;
  }
  size_t units = phrases;
  for (uint8_t a : alone) {
    units += a;
  }
  return units > 1;
}

void score_weights(uint64_t docs, std::span<const uint8_t> alone, std::span<const uint64_t> df,
                   size_t phrases, bool phrase_df, std::vector<double>& idf,
                   std::vector<double>& phrase_idf) {
  idf.resize(alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    // a term the query repeats counts once per occurrence, as FTS5 sums one phrase per
    // occurrence (the same idf times the same part: x + x == 2x exactly)
    idf[i] = alone[i] != 0 ? alone[i] * bm25_idf(docs, df[i]) : 0.0;
  }
  phrase_idf.clear();
  if (phrase_df) {
    for (size_t p = 0; p < phrases; ++p) {
      phrase_idf.push_back(bm25_idf(docs, df[alone.size() + p]));
    }
  }
}

result<search_result, errc> backend::search(const query_args& args, scratch& s,
                                            const remote_query* remote) const {
  const uint32_t nl = static_cast<uint32_t>(shards_.size());
  query_plan plan{};
  plan.tags = std::span<const std::string_view>(args.tags.data(), args.tag_count);
  plan.since = args.since;
  plan.until = args.until;
  plan.sort = args.sort;
  plan.k = std::min<uint32_t>(args.offset + args.limit, kMaxK);
  if (remote != nullptr &&
      (remote->is_story() || remote->remotes() != remote_ || !remote->st_->df_done ||
       remote->st_->local_ok.size() != nl || !remote->matches(args))) {
    remote = nullptr;  // not a fan-out of these args: the remote slots did not answer
  }
  if (remote != nullptr) {
    // the plan and the global idf of the fan-out (the idf the remotes searched with)
    const remote_query::state& st = *remote->st_;
    st.point(plan);
    plan.avgdl = st.avgdl;
    for (uint32_t i = 0; i < nl; ++i) {
      s.answered_[i] = st.local_ok[i];
    }
    return fan_out(plan, args.offset, s, remote);
  }
  // 1. plan
  plan_terms(args.query, s.token_chars_, s.terms_, s.phrases_, s.phrase_terms_, s.alone_);
  plan.terms = s.terms_;
  plan.phrases = s.phrases_;
  plan.phrase_terms = s.phrase_terms_;
  // 2. local document frequencies (of the phrases too when they weigh) -> idf
  const bool phrase_df = needs_phrase_df(s.alone_, s.phrases_.size(), args.sort);
  s.df_.assign(s.terms_.size() + (phrase_df ? s.phrases_.size() : 0), 0);
  query_plan df_plan{};
  df_plan.terms = s.terms_;
  if (phrase_df) {
    df_plan.phrases = s.phrases_;
    df_plan.phrase_terms = s.phrase_terms_;
  }
  add_local_doc_freqs(df_plan, s, s.df_.data(), s.answered_.data());
  score_weights(global_.docs, s.alone_, s.df_, s.phrases_.size(), phrase_df, s.idf_, s.phrase_idf_);
  plan.idf = s.idf_;
  plan.phrase_idf = s.phrase_idf_;
  // 3. fan out and merge
  return fan_out(plan, args.offset, s, nullptr);
}

bool backend::add_local_doc_freqs(const query_plan& plan, scratch& s, uint64_t* df,
                                  uint8_t* answered) const {
  bool all = true;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const bool ok = shards_[i]->add_doc_freqs(plan, *s.ws_, df);
    all = all && ok;
    if (answered != nullptr) {
      answered[i] = ok ? 1 : 0;
    }
  }
  return all;
}

result<search_result, errc> backend::search_plan(const query_plan& plan, scratch& s) const {
  for (size_t i = 0; i < shards_.size(); ++i) {
    s.answered_[i] = 1;
  }
  return fan_out(plan, 0, s, nullptr);
}

result<search_result, errc> backend::fan_out(const query_plan& plan, uint32_t offset, scratch& s,
                                             const remote_query* remote) const {
  const uint32_t nl = static_cast<uint32_t>(shards_.size());
  const uint32_t n = nl + remote_;
  // a scratch made by make_scratch() (or for at least shard_count() slots)
  TOLLGATE_CHECK(s.answers_.size() >= nl && s.lists_.size() >= n && s.answered_.size() >= n);
  search_result r;
  r.shards = n;
  r.remote = remote;
  for (uint32_t i = 0; i < nl; ++i) {
    shard_answer& a = s.answers_[i];
    a.total = 0;
    a.hits.clear();
    if (s.answered_[i] == 0 || !shards_[i]->search(plan, *s.ws_, a)) {
      s.answered_[i] = 0;
      s.lists_[i] = {};
      continue;
    }
    ++r.answered;
    r.total += a.total;
    s.lists_[i] = a.hits;
  }
  return merge(plan, offset, s, remote, r);
}

result<search_result, errc> backend::merge(const query_plan& plan, uint32_t offset, scratch& s,
                                           const remote_query* remote, search_result r) const {
  const uint32_t nl = static_cast<uint32_t>(shards_.size());
  const uint32_t n = nl + remote_;
  for (uint32_t j = 0; j < remote_; ++j) {
    const uint32_t i = nl + j;
    s.lists_[i] = {};
    s.answered_[i] = 0;
    if (remote == nullptr) {
      continue;
    }
    const remote_query::remote_reply& a = remote->st_->answers[j];
    if (!a.search_ok) {
      continue;
    }
    s.answered_[i] = 1;
    ++r.answered;
    r.total += a.total;
    s.lists_[i] = a.hits;
  }
  if (r.answered == 0) {
    return unexpected(errc::unavailable);
  }

  // merge the best k: every list is sorted best first.
  s.merged_.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.heads_[i] = 0;
  }
  while (s.merged_.size() < plan.k) {
    int best = -1;
    for (uint32_t i = 0; i < n; ++i) {
      const std::span<const hit> l = s.lists_[i];
      if (s.heads_[i] >= l.size()) {
        continue;
      }
      if (best < 0 || hit_better(l[s.heads_[i]], s.lists_[best][s.heads_[best]])) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      break;
    }
    s.merged_.push_back(s.lists_[best][s.heads_[best]++]);
    s.merged_.back().shard = static_cast<uint32_t>(best);
  }
  size_t from = std::min<size_t>(offset, s.merged_.size());
  r.stories = std::span<const hit>(s.merged_.data() + from, s.merged_.size() - from);
  return r;
}

search_job::search_job(const backend& b) : s_(b.make_scratch()) {}
search_job::~search_job() = default;

bool search_job::matches(const query_args& a) const noexcept {
  if (phase_ == phase::idle || a.query != args_.query || a.limit != args_.limit ||
      a.offset != args_.offset || a.since != args_.since || a.until != args_.until ||
      a.sort != args_.sort || a.tag_count != args_.tag_count) {
    return false;
  }
  for (uint32_t i = 0; i < a.tag_count; ++i) {
    if (a.tags[i] != args_.tags[i]) {
      return false;
    }
  }
  return true;
}

void backend::start(const query_args& args, search_job& job) const {
  // the arguments' bytes, owned: the request they came from may be parsed again meanwhile
  job.chars_.clear();
  job.chars_.append(args.query);
  for (uint32_t i = 0; i < args.tag_count; ++i) {
    job.chars_.append(args.tags[i]);
  }
  job.args_ = args;
  size_t at = 0;
  job.args_.query = std::string_view(job.chars_).substr(at, args.query.size());
  at += args.query.size();
  for (uint32_t i = 0; i < args.tag_count; ++i) {
    job.args_.tags[i] = std::string_view(job.chars_).substr(at, args.tags[i].size());
    at += args.tags[i].size();
  }
  // the plan and the document-frequency plan, as search() makes them
  scratch& s = *job.s_;
  const query_args& a = job.args_;
  query_plan& plan = job.plan_;
  plan = query_plan{};
  plan.tags = std::span<const std::string_view>(a.tags.data(), a.tag_count);
  plan.since = a.since;
  plan.until = a.until;
  plan.sort = a.sort;
  plan.k = std::min<uint32_t>(a.offset + a.limit, kMaxK);
  plan_terms(a.query, s.token_chars_, s.terms_, s.phrases_, s.phrase_terms_, s.alone_);
  plan.terms = s.terms_;
  plan.phrases = s.phrases_;
  plan.phrase_terms = s.phrase_terms_;
  job.phrase_df_ = needs_phrase_df(s.alone_, s.phrases_.size(), a.sort);
  s.df_.assign(s.terms_.size() + (job.phrase_df_ ? s.phrases_.size() : 0), 0);
  job.df_plan_ = query_plan{};
  job.df_plan_.terms = s.terms_;
  if (job.phrase_df_) {
    job.df_plan_.phrases = s.phrases_;
    job.df_plan_.phrase_terms = s.phrase_terms_;
  }
  job.phase_ = search_job::phase::doc_freqs;
  job.shard_ = 0;
  job.first_ = true;
  job.work_ = 0;
  job.result_ = unexpected(errc::unavailable);
}

bool backend::run_doc_freqs(search_job& job, uint64_t& budget) const {
  scratch& s = *job.s_;
  for (; job.shard_ < shards_.size(); ++job.shard_, job.first_ = true) {
    const slice r = shards_[job.shard_]->doc_freqs_slice(job.df_plan_, *s.ws_, s.df_.data(),
                                                         job.first_, budget);
    job.first_ = false;
    if (r == slice::more) {
      return false;
    }
    s.answered_[job.shard_] = r == slice::done ? 1 : 0;
  }
  score_weights(global_.docs, s.alone_, s.df_, s.phrases_.size(), job.phrase_df_, s.idf_,
                s.phrase_idf_);
  job.plan_.idf = s.idf_;
  job.plan_.phrase_idf = s.phrase_idf_;
  return true;
}

bool backend::run_evaluate(search_job& job, uint64_t& budget) const {
  scratch& s = *job.s_;
  for (; job.shard_ < shards_.size(); ++job.shard_, job.first_ = true) {
    shard_answer& a = s.answers_[job.shard_];
    if (s.answered_[job.shard_] == 0) {
      continue;
    }
    const slice r = shards_[job.shard_]->search_slice(job.plan_, *s.ws_, a, job.first_, budget);
    job.first_ = false;
    if (r == slice::more) {
      return false;
    }
    s.answered_[job.shard_] = r == slice::done ? 1 : 0;
  }
  return true;
}

bool backend::run(search_job& job, uint64_t budget) const {
  TOLLGATE_CHECK(job.started());
  budget = std::max<uint64_t>(budget, 1);
  const uint64_t given = budget;
  const bool finished = run_phases(job, budget);
  if (given != UINT64_MAX) {
    job.work_ += given - budget;
  }
  return finished;
}

bool backend::run_phases(search_job& job, uint64_t& budget) const {
  if (job.phase_ == search_job::phase::doc_freqs) {
    if (!run_doc_freqs(job, budget)) {
      return false;
    }
    job.phase_ = search_job::phase::evaluate;
    job.shard_ = 0;
    job.first_ = true;
  }
  if (job.phase_ == search_job::phase::evaluate) {
    if (!run_evaluate(job, budget)) {
      return false;
    }
    scratch& s = *job.s_;
    search_result r;
    r.shards = static_cast<uint32_t>(shards_.size()) + remote_;
    for (uint32_t i = 0; i < shards_.size(); ++i) {
      s.lists_[i] = {};
      if (s.answered_[i] != 0) {
        ++r.answered;
        r.total += s.answers_[i].total;
        s.lists_[i] = s.answers_[i].hits;
      } else {
        s.answers_[i].total = 0;
        s.answers_[i].hits.clear();
      }
    }
    job.result_ = merge(job.plan_, job.args_.offset, s, nullptr, r);
    job.phase_ = search_job::phase::done;
  }
  return true;
}

void backend::render_hit(const hit& h, json_out& out, const remote_query* remote) const {
  if (h.shard < shards_.size()) {
    // Without its text a story's render reads only the short fields, stored raw: it cannot
    // fail, and a search never decompresses a text.
    const auto r = shards_[h.shard]->render_story(h.doc, false, out);
    TOLLGATE_ASSERT(r.has_value());
    (void)r;
    return;
  }
  const uint32_t j = h.shard - static_cast<uint32_t>(shards_.size());
  TOLLGATE_CHECK(remote != nullptr && j < remote->remotes());
  out.raw(remote->st_->answers[j].json(h.doc));
}

void backend::render(const search_result& r, json_out& out) const {
  out.raw("{\"total\":");
  out.number(static_cast<int64_t>(r.total));
  out.raw(",\"stories\":[");
  bool first = true;
  for (const hit& h : r.stories) {
    if (!first) {
      out.raw(",");
    }
    first = false;
    render_hit(h, out, r.remote);
  }
  out.raw("]");
  if (r.partial()) {
    out.raw(",\"partial\":true,\"shards\":{\"answered\":");
    out.number(r.answered);
    out.raw(",\"total\":");
    out.number(r.shards);
    out.raw("}");
  }
  out.raw("}");
}

result<story_ref, errc> backend::find_story(std::string_view id, const remote_query* remote) const {
  const uint32_t nl = static_cast<uint32_t>(shards_.size());
  bool local_failed = false;
  if (nl > 0) {
    uint32_t slot = shard_of(id, nl);
    auto r = shards_[slot]->find(id);
    if (r) {
      return story_ref{slot, *r};
    }
    if (remote_ == 0) {
      return unexpected(r.error());
    }
    local_failed = r.error() == errc::unavailable;
  }
  if (remote_ == 0 || remote == nullptr || !remote->is_story() || remote->remotes() != remote_ ||
      !remote->matches_story(id)) {
    return unexpected(errc::unavailable);
  }
  bool all_absent = !local_failed;
  for (uint32_t j = 0; j < remote_; ++j) {
    const remote_query::remote_reply& a = remote->st_->answers[j];
    if (a.story == remote_query::remote_reply::story_state::found) {
      return story_ref{nl + j, 0};
    }
    if (a.story != remote_query::remote_reply::story_state::absent) {
      all_absent = false;
    }
  }
  return unexpected(all_absent ? errc::not_found : errc::unavailable);
}

result<void, errc> backend::render_story(story_ref ref, json_out& out, const remote_query* remote,
                                         pending_read* nowait) const {
  if (ref.shard < shards_.size()) {
    return shards_[ref.shard]->render_story(ref.doc, true, out, nowait);
  }
  const uint32_t j = ref.shard - static_cast<uint32_t>(shards_.size());
  TOLLGATE_CHECK(remote != nullptr && j < remote->remotes());
  out.raw(remote->st_->answers[j].json(0));
  return {};
}

result<void, errc> backend::search_stories(const query_args& args, scratch& s, out_buffer& out,
                                           bool nested, const remote_query* remote) const {
  auto r = search(args, s, remote);
  if (!r) {
    return unexpected(r.error());
  }
  json_out j(out, nested);
  render(*r, j);
  return {};
}

result<void, errc> backend::get_story(std::string_view id, out_buffer& out, bool nested,
                                      const remote_query* remote, pending_read* nowait) const {
  auto r = find_story(id, remote);
  if (!r) {
    return unexpected(r.error());
  }
  json_out j(out, nested);
  return render_story(*r, j, remote, nowait);
}

}  // namespace tollgate::search
