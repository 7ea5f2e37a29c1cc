// The evaluation tests' shared fixture: a generated corpus built into local shards with each
// story's tokens kept as query material, random query plans over it, and `expect_same` (totals,
// ids, docs and keys bit for bit). Used by evaluate_test (against reference_search) and
// prune_test (pruning on against off).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "search/fleet_impl.h"
#include "search/local_shard.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search::test_support {

struct corpus_fixture {
  std::vector<std::unique_ptr<shard_source>> owned;
  std::vector<local_shard*> shards;
  std::vector<std::vector<std::string>> docs;    // tokens of title + text, per generated story
  std::vector<std::vector<std::string>> titles;  // tokens of the title alone
  std::vector<int64_t> times;
  uint64_t total_docs = 0;

  corpus_fixture(uint64_t count, uint64_t seed, uint32_t nshards) {
    std::string data;
    generate_corpus(count, seed, [&data](std::string_view c) { data += c; });
    load_options o;
    o.shards = nshards;
    o.skip_bad_lines = false;
    load_report rep;
    auto built = build_shards(data, o, rep);
    EXPECT_TRUE(built.has_value());
    owned = std::move(*built);
    shard_stats global;
    for (auto& s : owned) {
      shards.push_back(static_cast<local_shard*>(s.get()));
      shard_stats st = s->stats();
      global.docs += st.docs;
      global.title_tokens += st.title_tokens;
      global.text_tokens += st.text_tokens;
    }
    for (auto& s : owned) {
      s->finalize(global);
    }
    total_docs = global.docs;
    // Query material: the tokens of each story (raw JSON fields; an escape only makes a token
    // that matches nothing, which is a fine query too).
    size_t at = 0;
    while (at < data.size()) {
      size_t nl = data.find('\n', at);
      std::string_view line(data.data() + at, nl - at);
      std::vector<std::string> toks;
      for (std::string_view field : {"\"title\":\"", "\"text\":\""}) {
        size_t f = line.find(field) + field.size();
        token_stream ts(line.substr(f, line.find('"', f) - f));
        std::string_view tok;
        while (ts.next(tok)) {
          toks.emplace_back(tok);
        }
        if (titles.size() == docs.size()) {
          titles.push_back(toks);  // after the first field, the title
        }
      }
      size_t t = line.find("\"time\":") + 7;
      times.push_back(std::strtoll(line.data() + t, nullptr, 10));
      docs.push_back(std::move(toks));
      at = nl + 1;
    }
  }
};

// A random query plan over the fixture; owns its storage.
struct random_plan {
  std::vector<std::string> term_store;
  std::vector<std::string_view> terms;
  std::vector<double> idf;
  std::vector<double> phrase_idf;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  std::vector<uint8_t> alone;  // per term: stands on its own (else only inside a phrase)
  std::vector<std::string_view> tags;
  query_plan plan{};
  std::string text;  // for failure messages

  uint32_t add_term(std::string_view t, bool on_its_own = true) {
    for (size_t i = 0; i < term_store.size(); ++i) {
      if (term_store[i] == t) {
        alone[i] = alone[i] || on_its_own;
        return static_cast<uint32_t>(i);
      }
    }
    term_store.emplace_back(t);
    alone.push_back(on_its_own);
    return static_cast<uint32_t>(term_store.size() - 1);
  }
};

// Over 80 lines on purpose: one random draw after another for each part of a plan.
inline void make_plan(const corpus_fixture& fx, std::mt19937_64& rng, random_plan& rp) {
  static const char* common[] = {"the", "of", "a", "and", "to", "in", "is", "rust", "linux"};
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  const auto& doc = fx.docs[pick(fx.docs.size())];
  const size_t kind = pick(6);  // 0-2: n terms, 3: phrase, 4: phrase + term, 5: common terms
  if (doc.empty()) {
    rp.add_term("the");
  } else if (kind <= 2) {
    for (size_t i = 0; i <= kind; ++i) {
      rp.add_term(doc[pick(doc.size())]);
    }
  } else if (kind <= 4) {
    const size_t len = 2 + pick(4);  // 2 to 5 words
    const size_t start = doc.size() > len ? pick(doc.size() - len + 1) : 0;
    const uint32_t first = static_cast<uint32_t>(rp.phrase_terms.size());
    for (size_t i = start; i < std::min(doc.size(), start + len); ++i) {
      rp.phrase_terms.push_back(rp.add_term(doc[i], false));
    }
    const uint32_t n = static_cast<uint32_t>(rp.phrase_terms.size()) - first;
    if (n >= 2) {
      rp.phrases.push_back({first, n});
    }
    if (kind == 4) {
      rp.add_term(common[pick(std::size(common))]);
    }
  } else {
    const size_t n = 1 + pick(3);
    for (size_t i = 0; i < n; ++i) {
      rp.add_term(common[pick(std::size(common))]);
    }
  }
  for (const std::string& t : rp.term_store) {
    rp.terms.emplace_back(t);
    rp.text += t + " ";
  }
  if (rp.phrases.empty()) {
    rp.alone.assign(rp.terms.size(), 1);  // a lone "phrase" of one word is a term
  }
  rp.plan.terms = rp.terms;
  rp.plan.phrases = rp.phrases;
  rp.plan.phrase_terms = rp.phrase_terms;
  // weights as the backend makes them: idf for lone terms, 0 for phrase-only ones, and the
  // phrases' own idf from their document frequencies
  std::vector<uint64_t> df(rp.terms.size() + rp.phrases.size(), 0);
  shard_workspace ws;
  for (local_shard* s : fx.shards) {
    s->add_doc_freqs(rp.plan, ws, df.data());
  }
  score_weights(fx.total_docs, rp.alone, df, rp.phrases.size(), true, rp.idf, rp.phrase_idf);
  rp.plan.idf = rp.idf;
  rp.plan.phrase_idf = rp.phrase_idf;
  // a quarter of the plans rank under another corpus average (a fleet's), above or below the
  // shards' own, which takes the per-doc norm and scaled-bound path
  static const double avgdl_factor[] = {0, 0, 0, 0, 0, 0, 0.7, 1.6};
  const double factor = avgdl_factor[pick(std::size(avgdl_factor))];
  if (factor != 0) {
    uint64_t tokens = 0;
    for (const auto& d : fx.docs) {
      tokens += d.size();
    }
    rp.plan.avgdl = factor * static_cast<double>(tokens) / static_cast<double>(fx.docs.size());
    rp.text += " avgdl*" + std::to_string(factor);
  }
  rp.plan.since = std::numeric_limits<int64_t>::min();
  rp.plan.until = std::numeric_limits<int64_t>::max();
  const size_t filter = pick(8);
  if (filter == 1 || filter == 3) {
    rp.plan.since = fx.times[pick(fx.times.size())];
    rp.text += " since=" + std::to_string(rp.plan.since);
  }
  if (filter == 2 || filter == 3) {
    rp.plan.until = fx.times[pick(fx.times.size())];
    rp.text += " until=" + std::to_string(rp.plan.until);
  }
  if (filter == 4) {
    static const char* tags[] = {"rust", "linux", "python", "go", "security"};
    rp.tags.emplace_back(tags[pick(std::size(tags))]);
    rp.text += " tag=" + std::string(rp.tags.back());
  }
  rp.plan.tags = rp.tags;
  rp.plan.sort = pick(2) ? sort_order::relevance : sort_order::date;
  static const uint32_t ks[] = {1, 2, 5, 10, 10, 10, 20, 31, 32, 33, 50, 128, 129, 1050};
  rp.plan.k = ks[pick(std::size(ks))];
  rp.text += rp.plan.sort == sort_order::date ? " sort=date" : " sort=relevance";
  rp.text += " k=" + std::to_string(rp.plan.k);
}

inline void expect_same(const shard_answer& got, const shard_answer& want,
                        const std::string& what) {
  ASSERT_EQ(got.total, want.total) << what;
  ASSERT_EQ(got.hits.size(), want.hits.size()) << what;
  for (size_t i = 0; i < got.hits.size(); ++i) {
    EXPECT_EQ(got.hits[i].id, want.hits[i].id) << what << " rank " << i;
    EXPECT_EQ(got.hits[i].doc, want.hits[i].doc) << what << " rank " << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(got.hits[i].key), std::bit_cast<uint64_t>(want.hits[i].key))
        << what << " rank " << i << ": " << got.hits[i].key << " vs " << want.hits[i].key;
  }
}

}  // namespace tollgate::search::test_support
