// backend: query planning, fan-out over shards, deterministic merge, payload rendering.
#include "tollgate/search/backend.h"

#include <cmath>

#include "search/local_shard.h"
#include "tollgate/common/assert.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {

namespace {
constexpr size_t max_k = max_offset + max_limit;
}  // namespace

std::string_view message(errc e) noexcept {
  switch (e) {
    case errc::not_found:
      return "No story has this id. Check the id, for example from the results of "
             "search_stories.";
    case errc::unavailable:
      return "The search backend is temporarily unavailable: no shard answered. This is an "
             "outage, not an empty result; retry after retry_after_secs.";
  }
  return "Unknown error.";
}

std::string_view code(errc e) noexcept {
  switch (e) {
    case errc::not_found:
      return "not_found";
    case errc::unavailable:
      return "unavailable";
  }
  return "internal";
}

scratch::scratch(size_t shard_count)
    : answers_(shard_count), answered_(shard_count), heads_(shard_count),
      ws_(std::make_unique<shard_workspace>()) {
  token_chars_.reserve(2048);
  terms_.reserve(256);
  idf_.reserve(256);
  df_.reserve(256);
  phrases_.reserve(128);
  phrase_terms_.reserve(256);
  for (shard_answer& a : answers_) {
    a.hits.reserve(max_k);
  }
  merged_.reserve(max_k);
}

scratch::~scratch() = default;

backend::backend(std::vector<std::unique_ptr<shard_source>> shards) : shards_(std::move(shards)) {
  for (const auto& s : shards_) {
    shard_stats st = s->stats();
    global_.docs += st.docs;
    global_.title_tokens += st.title_tokens;
    global_.text_tokens += st.text_tokens;
  }
  for (auto& s : shards_) {
    s->finalize(global_);
  }
}

backend::~backend() = default;

std::unique_ptr<scratch> backend::make_scratch() const {
  return std::make_unique<scratch>(shards_.size());
}

namespace {

// Adds a distinct term (copied into the scratch's character buffer) and returns its index.
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

bool hit_better(const hit& a, const hit& b) noexcept {
  return a.key > b.key || (a.key == b.key && id_less(a.id, b.id));
}

}  // namespace

result<search_result, errc> backend::search(const query_args& args, scratch& s) const {
  // 1. plan: terms outside quotes are single terms; quoted runs are phrases.
  s.token_chars_.clear();
  s.token_chars_.reserve(args.query.size() + 8);  // tokens never outgrow their source text
  s.terms_.clear();
  s.phrases_.clear();
  s.phrase_terms_.clear();
  std::string_view q = args.query;
  bool in_quotes = false;
  while (!q.empty()) {
    size_t quote = q.find('"');
    std::string_view seg = q.substr(0, quote);
    token_stream ts(seg);
    std::string_view tok;
    uint32_t first = static_cast<uint32_t>(s.phrase_terms_.size());
    while (ts.next(tok)) {
      uint32_t t = add_term(tok, s.token_chars_, s.terms_);
      if (in_quotes) {
        s.phrase_terms_.push_back(t);
      }
    }
    if (in_quotes) {
      uint32_t count = static_cast<uint32_t>(s.phrase_terms_.size()) - first;
      if (count >= 2) {
        s.phrases_.push_back({first, count});
      } else {
        s.phrase_terms_.resize(first);
      }
    }
    if (quote == std::string_view::npos) {
      break;
    }
    q.remove_prefix(quote + 1);
    in_quotes = !in_quotes;
  }
  const uint32_t n = static_cast<uint32_t>(shards_.size());
  query_plan plan{};
  plan.terms = s.terms_;
  plan.phrases = s.phrases_;
  plan.phrase_terms = s.phrase_terms_;
  plan.tags = std::span<const std::string_view>(args.tags.data(), args.tag_count);
  plan.since = args.since;
  plan.until = args.until;
  plan.sort = args.sort;
  plan.k = std::min<uint32_t>(args.offset + args.limit, max_k);

  // 2. global document frequencies -> idf (BM25: ln(1 + (N - df + 0.5) / (df + 0.5))).
  s.df_.assign(s.terms_.size(), 0);
  for (uint32_t i = 0; i < n; ++i) {
    s.answered_[i] = shards_[i]->add_doc_freqs(plan, s.df_.data()) ? 1 : 0;
  }
  s.idf_.resize(s.terms_.size());
  const double docs = static_cast<double>(global_.docs);
  for (size_t i = 0; i < s.terms_.size(); ++i) {
    const double df = static_cast<double>(s.df_[i]);
    s.idf_[i] = std::log(1.0 + (docs - df + 0.5) / (df + 0.5));
  }
  plan.idf = s.idf_;

  // 3. fan out
  search_result r;
  r.shards = n;
  for (uint32_t i = 0; i < n; ++i) {
    shard_answer& a = s.answers_[i];
    a.total = 0;
    a.hits.clear();
    if (s.answered_[i] == 0 || !shards_[i]->search(plan, *s.ws_, a)) {
      s.answered_[i] = 0;
      continue;
    }
    ++r.answered;
    r.total += a.total;
    for (hit& h : a.hits) {
      h.shard = i;
    }
  }
  if (r.answered == 0) {
    return unexpected(errc::unavailable);
  }

  // 4. merge the best k: every answer is sorted best first.
  s.merged_.clear();
  for (uint32_t i = 0; i < n; ++i) {
    s.heads_[i] = 0;
  }
  while (s.merged_.size() < plan.k) {
    int best = -1;
    for (uint32_t i = 0; i < n; ++i) {
      const shard_answer& a = s.answers_[i];
      if (s.answered_[i] == 0 || s.heads_[i] >= a.hits.size()) {
        continue;
      }
      if (best < 0 || hit_better(a.hits[s.heads_[i]], s.answers_[best].hits[s.heads_[best]])) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) {
      break;
    }
    s.merged_.push_back(s.answers_[best].hits[s.heads_[best]++]);
  }
  size_t from = std::min<size_t>(args.offset, s.merged_.size());
  r.stories = std::span<const hit>(s.merged_.data() + from, s.merged_.size() - from);
  return r;
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
    shards_[h.shard]->render_story(h.doc, false, out);
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

result<story_ref, errc> backend::find_story(std::string_view id) const {
  if (shards_.empty()) {
    return unexpected(errc::unavailable);
  }
  uint32_t slot = shard_of(id, static_cast<uint32_t>(shards_.size()));
  auto r = shards_[slot]->find(id);
  if (!r) {
    return unexpected(r.error());
  }
  return story_ref{slot, *r};
}

void backend::render_story(story_ref ref, json_out& out) const {
  shards_[ref.shard]->render_story(ref.doc, true, out);
}

result<void, errc> backend::search_stories(const query_args& args, scratch& s, out_buffer& out,
                                           bool nested) const {
  auto r = search(args, s);
  if (!r) {
    return unexpected(r.error());
  }
  json_out j(out, nested);
  render(*r, j);
  return {};
}

result<void, errc> backend::get_story(std::string_view id, out_buffer& out, bool nested) const {
  auto r = find_story(id);
  if (!r) {
    return unexpected(r.error());
  }
  json_out j(out, nested);
  render_story(*r, j);
  return {};
}

}  // namespace tollgate::search
