// The table of adjacent pairs of frequent words (local_shard::pair_docs_): a two-word phrase's
// document count read from it equals the count the postings walk makes and the exhaustive
// reference's, and a search of the phrase (a pair term's, or with the table's total) answers as
// without them, whole and in slices. The batched walk of a two-word phrase by date
// (phrase_walk_eval) answers as the leapfrog and the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "search/local_shard.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

// A finalized set of shards over a generated corpus, built under the given pair table limits.
struct shards {
  std::vector<std::unique_ptr<shard_source>> owned;
  std::vector<local_shard*> local;
  uint64_t docs = 0;

  shards(const std::string& data, uint32_t nshards, uint32_t min_df, uint32_t max_words) {
    const uint32_t saved_min = pair_min_df, saved_max = pair_max_words;
    pair_min_df = min_df;
    pair_max_words = max_words;
    load_options o;
    o.shards = nshards;
    o.skip_bad_lines = false;
    load_report rep;
    auto built = build_shards(data, o, rep);
    pair_min_df = saved_min;
    pair_max_words = saved_max;
    EXPECT_TRUE(built.has_value());
    owned = std::move(*built);
    shard_stats global;
    for (auto& s : owned) {
      local.push_back(static_cast<local_shard*>(s.get()));
      global.docs += s->stats().docs;
      global.title_tokens += s->stats().title_tokens;
      global.text_tokens += s->stats().text_tokens;
    }
    for (auto& s : owned) {
      s->finalize(global);
    }
    docs = global.docs;
  }
};

// Each story's title and text tokens, with the field boundary (its title's token count).
struct story_tokens {
  std::vector<std::string> toks;
  size_t title = 0;
};

std::vector<story_tokens> tokens_of(const std::string& data) {
  std::vector<story_tokens> out;
  for (size_t at = 0; at < data.size();) {
    const size_t nl = data.find('\n', at);
    const std::string_view line(data.data() + at, nl - at);
    story_tokens st;
    auto add_field = [&st, line](std::string_view field) {
      const size_t f = line.find(field) + field.size();
      token_stream ts(line.substr(f, line.find('"', f) - f));
      std::string_view tok;
      while (ts.next(tok)) {
        st.toks.emplace_back(tok);
      }
    };
    add_field("\"title\":\"");
    st.title = st.toks.size();
    add_field("\"text\":\"");
    out.push_back(std::move(st));
    at = nl + 1;
  }
  return out;
}

// The phrase "a b" as a plan of its own (weights set by the caller).
struct phrase_plan {
  std::vector<std::string_view> terms;
  std::vector<uint32_t> phrase_terms;
  phrase_span whole{0, 2};
  std::vector<double> idf, phrase_idf;
  query_plan plan{};

  phrase_plan(std::string_view a, std::string_view b) {
    terms.push_back(a);
    if (b != a) {
      terms.push_back(b);
    }
    phrase_terms = {0, b == a ? 0u : 1u};
    idf.assign(terms.size(), 0.0);
    plan.terms = terms;
    plan.phrases = std::span<const phrase_span>(&whole, 1);
    plan.phrase_terms = phrase_terms;
    plan.since = std::numeric_limits<int64_t>::min();
    plan.until = std::numeric_limits<int64_t>::max();
    plan.sort = sort_order::relevance;
    plan.k = 10;
  }
};

void expect_same(const shard_answer& got, const shard_answer& want, const std::string& what) {
  ASSERT_EQ(got.total, want.total) << what;
  ASSERT_EQ(got.hits.size(), want.hits.size()) << what;
  for (size_t i = 0; i < got.hits.size(); ++i) {
    EXPECT_EQ(got.hits[i].doc, want.hits[i].doc) << what << " rank " << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(got.hits[i].key), std::bit_cast<uint64_t>(want.hits[i].key))
        << what << " rank " << i;
  }
}

// Other pages (k 200, 33), a time filter and the date sort of `plan`: each shard of `with`
// answers as the same shard of `without`, whole and in slices of a few postings.
void expect_variants_same(const query_plan& plan, const shards& with, const shards& without,
                          shard_workspace& ws, const std::string& what) {
  shard_answer got, walked;
  got.hits.reserve(256);
  walked.hits.reserve(256);
  for (int variant = 0; variant < 3; ++variant) {
    query_plan v = plan;
    v.k = variant == 0 ? 200 : 33;
    v.sort = variant == 2 ? sort_order::date : sort_order::relevance;
    if (variant > 0) {
      v.since = 1500000000;
    }
    const std::string vwhat = what + " variant " + std::to_string(variant);
    for (size_t si = 0; si < with.local.size(); ++si) {
      ASSERT_TRUE(without.local[si]->search(v, ws, walked));
      ASSERT_TRUE(with.local[si]->search(v, ws, got));
      expect_same(got, walked, vwhat + " shard " + std::to_string(si));
      bool first = true;
      slice sl = slice::more;
      while (sl == slice::more) {
        uint64_t left = 3;
        sl = with.local[si]->search_slice(v, ws, got, first, left);
        first = false;
      }
      expect_same(got, walked, vwhat + " sliced, shard " + std::to_string(si));
    }
  }
}

TEST(phrase_pairs_test, table_counts_equal_the_walk_and_the_reference) {
  // Verifies, for two-word phrases drawn from the stories (adjacent words, a title's last word
  // with its text's first, random pairs of common words, a repeated word), that the document
  // frequency read from the pair table equals the one counted by walking the postings (a build
  // without the table) and the exhaustive reference's total; and that a ranked search of the
  // phrase, pruned with the table's total, gives the same total, docs, order and keys as the
  // build without the table and as the reference; and for other pages (k 33, 200), a time
  // filter and the date sort, whole and in slices, as the build without the table.
  std::string data;
  generate_corpus(2400, 73, [&data](std::string_view c) { data += c; });
  // words in a tenth of the docs: some frequent words in the table, others left out
  shards with(data, 2, 120, 1000), without(data, 2, 120, 0);
  for (local_shard* s : with.local) {
    ASSERT_GT(s->pair_words(), 20u);
    ASSERT_LT(s->pair_words(), 1000u);
  }
  for (local_shard* s : without.local) {
    ASSERT_EQ(s->pair_words(), 0u);
  }
  const std::vector<story_tokens> stories = tokens_of(data);
  std::mt19937_64 rng(5);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int i = 0; i < 120; ++i) {
    const story_tokens& st = stories[rng() % stories.size()];
    if (st.toks.size() < 2) {
      continue;
    }
    const size_t at = rng() % (st.toks.size() - 1);
    pairs.emplace_back(st.toks[at], st.toks[at + 1]);
    if (st.title > 0 && st.title < st.toks.size()) {  // across the field boundary
      pairs.emplace_back(st.toks[st.title - 1], st.toks[st.title]);
    }
  }
  static const char* common[] = {"the", "a", "of", "to", "is", "rust"};
  for (const char* a : common) {
    for (const char* b : common) {
      pairs.emplace_back(a, b);
    }
  }
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;  // every phrase with a known total takes the pruned evaluation
  shard_workspace ws;
  shard_answer got, walked, want;
  got.hits.reserve(64);
  walked.hits.reserve(64);
  uint64_t matched = 0;
  for (const auto& [a, b] : pairs) {
    phrase_plan pp(a, b);
    const std::string what = "\"" + a + " " + b + "\"";
    std::vector<uint64_t> df_with(pp.terms.size() + 1, 0), df_without(df_with.size(), 0);
    for (size_t si = 0; si < with.local.size(); ++si) {
      ASSERT_TRUE(with.local[si]->add_doc_freqs(pp.plan, ws, df_with.data()));
      ASSERT_TRUE(without.local[si]->add_doc_freqs(pp.plan, ws, df_without.data()));
    }
    ASSERT_EQ(df_with, df_without) << what;
    matched += df_with.back() > 0;
    // ranked as the backend ranks it: the phrase's idf from its df
    const double n = static_cast<double>(with.docs), m = static_cast<double>(df_with.back());
    pp.phrase_idf = {std::max(1e-6, std::log((n - m + 0.5) / (m + 0.5)))};
    pp.plan.idf = pp.idf;
    pp.plan.phrase_idf = pp.phrase_idf;
    uint64_t total = 0;
    for (size_t si = 0; si < with.local.size(); ++si) {
      ASSERT_TRUE(with.local[si]->search(pp.plan, ws, got));
      ASSERT_TRUE(without.local[si]->search(pp.plan, ws, walked));
      with.local[si]->reference_search(pp.plan, want);
      expect_same(got, want, what + " shard " + std::to_string(si));
      expect_same(walked, want, what + " without the table, shard " + std::to_string(si));
      total += want.total;
      if (::testing::Test::HasFatalFailure()) {
        prune_min_lead_df = saved_min_lead;
        return;
      }
    }
    EXPECT_EQ(total, df_with.back()) << what;
    expect_variants_same(pp.plan, with, without, ws, what);
    if (::testing::Test::HasFatalFailure()) {
      prune_min_lead_df = saved_min_lead;
      return;
    }
  }
  prune_min_lead_df = saved_min_lead;
  EXPECT_GT(matched, pairs.size() / 2);  // the phrases match: the comparison means something
}

// The answers of one comparison, reserved once.
struct answers {
  shard_workspace ws;
  shard_answer got, walked, want;
  answers() {
    got.hits.reserve(256);
    walked.hits.reserve(256);
  }
};

// Searches shard si of the build with pair terms and of the one without, and the exhaustive
// reference: all three must answer the same (a.want holds the reference's answer). `pair_on`:
// whether the build with pair terms searched through them (never the one without).
void expect_as_reference(const query_plan& plan, const shards& with, const shards& without,
                         size_t si, answers& a, const std::string& what, bool& pair_on) {
  ASSERT_TRUE(with.local[si]->search(plan, a.ws, a.got)) << what;
  pair_on = a.ws.pair_on;
  ASSERT_TRUE(without.local[si]->search(plan, a.ws, a.walked)) << what;
  EXPECT_FALSE(a.ws.pair_on) << what;
  with.local[si]->reference_search(plan, a.want);
  expect_same(a.got, a.want, what + " shard " + std::to_string(si));
  expect_same(a.walked, a.want, what + " without pair terms, shard " + std::to_string(si));
}

// A plan of words that stand alone and phrases, e.g. {{"the"}, {"of", "a"}} for `the "of a"`:
// distinct terms in order of first use, a standing word weighted by its own (arbitrary) idf,
// once per use, words only in phrases weighted 0, and each phrase its own weight.
struct mixed_plan {
  std::vector<std::string> words;
  std::vector<std::string_view> terms;
  std::vector<double> idf, phrase_idf;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  query_plan plan{};

  explicit mixed_plan(const std::vector<std::vector<std::string>>& units) {
    words.reserve(64);
    auto term_of = [this](const std::string& w) {
      const auto at = std::find(words.begin(), words.end(), w);
      if (at != words.end()) {
        return static_cast<uint32_t>(at - words.begin());
      }
      words.push_back(w);
      idf.push_back(0.0);
      return static_cast<uint32_t>(words.size() - 1);
    };
    for (const std::vector<std::string>& u : units) {
      if (u.size() == 1) {
        idf[term_of(u[0])] += 0.5 + static_cast<double>(u[0].size()) / 8;
        continue;
      }
      phrases.push_back(
          {static_cast<uint32_t>(phrase_terms.size()), static_cast<uint32_t>(u.size())});
      for (const std::string& w : u) {
        phrase_terms.push_back(term_of(w));
      }
      phrase_idf.push_back(0.25 * static_cast<double>(phrases.size()) + 0.1);
    }
    terms.assign(words.begin(), words.end());
    plan.terms = terms;
    plan.idf = idf;
    plan.phrases = phrases;
    plan.phrase_terms = phrase_terms;
    plan.phrase_idf = phrase_idf;
    plan.since = std::numeric_limits<int64_t>::min();
    plan.until = std::numeric_limits<int64_t>::max();
    plan.sort = sort_order::relevance;
    plan.k = 10;
  }
};

TEST(phrase_pairs_test, phrases_through_pair_terms_answer_as_the_walk) {
  // Verifies that queries with phrases of pair-indexed words, beside terms (one of them also a
  // phrase's word), beside each other, repeated, or of three and five words (their pairs join
  // as terms of weight 0), are searched through pair terms (ws.pair_on) and give the same total,
  // docs, order and keys as the build without pair terms and as the exhaustive reference; with
  // k 200, a time filter and the date sort, whole and in slices; and that a phrase with a word
  // that is nowhere keeps the walk.
  std::string data;
  generate_corpus(2400, 91, [&data](std::string_view c) { data += c; });
  shards with(data, 2, 120, 1000), without(data, 2, 120, 0);
  static const char* common[] = {"the", "a", "of", "to", "is", "in", "and", "rust"};
  std::mt19937_64 rng(11);
  auto word = [&rng] { return std::string(common[rng() % std::size(common)]); };
  std::vector<std::vector<std::vector<std::string>>> queries;
  for (int i = 0; i < 60; ++i) {
    std::vector<std::vector<std::string>> units;
    const int standing = static_cast<int>(rng() % 3), pairs = 1 + static_cast<int>(rng() % 2);
    for (int j = 0; j < standing; ++j) {
      units.push_back({word()});
    }
    for (int j = 0; j < pairs; ++j) {
      units.push_back({word(), word()});
      if (rng() % 3 == 0) {
        units.back().push_back(word());  // three words: the pairs lead, positions decide
      }
    }
    std::shuffle(units.begin(), units.end(), rng);
    queries.push_back(units);
  }
  queries.push_back({{"of"}, {"of", "a"}});               // a word standing and in the phrase
  queries.push_back({{"the", "the"}, {"a", "a"}});        // repeated words
  queries.push_back({{"the"}, {"of", "a", "the"}});       // three words
  queries.push_back({{"is"}, {"of", "a"}, {"of", "a"}});  // the same phrase twice
  queries.push_back({{"of", "a", "to", "the", "is"}});    // five words
  queries.push_back({{"a", "zzzunknown"}});               // a word that is nowhere
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;
  answers a;
  size_t as_pairs = 0, matched = 0;
  for (size_t qi = 0; qi < queries.size(); ++qi) {
    mixed_plan mp(queries[qi]);
    std::string what = "query " + std::to_string(qi) + ":";
    for (const auto& u : queries[qi]) {
      std::string unit;
      for (const std::string& w : u) {
        unit += (unit.empty() ? "" : " ") + w;
      }
      what += u.size() == 1 ? " " + unit : " \"" + unit + "\"";
    }
    bool all_pairs = true;
    for (size_t si = 0; si < with.local.size(); ++si) {
      bool pair_on = false;
      expect_as_reference(mp.plan, with, without, si, a, what, pair_on);
      all_pairs = all_pairs && pair_on;
      matched += a.want.total > 0;
      if (::testing::Test::HasFatalFailure()) {
        prune_min_lead_df = saved_min_lead;
        return;
      }
    }
    if (qi + 1 == queries.size()) {
      EXPECT_FALSE(all_pairs) << what;
    }
    as_pairs += all_pairs;
    expect_variants_same(mp.plan, with, without, a.ws, what);
    if (::testing::Test::HasFatalFailure()) {
      prune_min_lead_df = saved_min_lead;
      return;
    }
  }
  prune_min_lead_df = saved_min_lead;
  EXPECT_GT(as_pairs, queries.size() / 2);  // the pair-term path ran
  EXPECT_GT(matched, queries.size() / 2);   // and the queries match: the comparison means something
}

TEST(phrase_pairs_test, long_phrases_count_every_start_as_the_reference) {
  // Verifies phrases of 3 to 20 words over texts of few words, where a phrase overlaps itself
  // ("the the the" in "the the the the" starts twice), repeats a word, ends a title (it never
  // runs on into the text) or first matches far into the text: the same total, docs, order and
  // keys (each doc's count of starts, in the title and in the text) as the exhaustive reference,
  // with and without pair terms; long phrases (over 16 words) too.
  static const char* vocab[] = {"the", "a", "of", "the", "the", "a"};
  std::mt19937_64 rng(23);
  std::string data;
  std::vector<std::vector<std::string>> texts;
  for (int i = 0; i < 600; ++i) {
    std::vector<std::string> title, text;
    for (size_t k = 1 + rng() % 4; k > 0; --k) {
      title.emplace_back(vocab[rng() % std::size(vocab)]);
    }
    for (size_t k = rng() % 60; k > 0; --k) {
      text.emplace_back(rng() % 9 == 0 ? "rust" : vocab[rng() % std::size(vocab)]);
    }
    auto join = [](const std::vector<std::string>& w) {
      std::string out;
      for (const std::string& x : w) {
        out += (out.empty() ? "" : " ") + x;
      }
      return out;
    };
    data += "{\"id\":\"s" + std::to_string(i) + "\",\"title\":\"" + join(title) +
            "\",\"time\":" + std::to_string(1600000000 + i) + ",\"text\":\"" + join(text) + "\"}\n";
    std::vector<std::string> all = title;
    all.insert(all.end(), text.begin(), text.end());
    texts.push_back(all);
  }
  shards with(data, 2, 20, 16), without(data, 2, 20, 0);
  std::vector<std::vector<std::string>> phrases = {
      {"the", "the", "the"},
      {"the", "the", "the", "the"},
      {"a", "the", "the"},
      {"the", "a", "the", "a"},
      {"of", "the", "rust"},
      {"rust", "rust", "rust"},
      {"the", "of", "a", "the", "the", "a", "of"},
  };
  for (int i = 0; i < 80; ++i) {  // windows of the stories' words: most of them match
    const auto& w = texts[rng() % texts.size()];
    const size_t len = 3 + rng() % 18;
    if (w.size() >= len) {
      const size_t at = rng() % (w.size() - len + 1);
      phrases.emplace_back(w.begin() + static_cast<std::ptrdiff_t>(at),
                           w.begin() + static_cast<std::ptrdiff_t>(at + len));
    }
  }
  answers a;
  size_t matched = 0, longer = 0;
  for (size_t qi = 0; qi < phrases.size(); ++qi) {
    mixed_plan mp({phrases[qi]});
    std::string what = "phrase " + std::to_string(qi) + ": \"";
    for (const std::string& x : phrases[qi]) {
      what += x + " ";
    }
    what += "\"";
    for (size_t si = 0; si < with.local.size(); ++si) {
      bool pair_on = false;
      expect_as_reference(mp.plan, with, without, si, a, what, pair_on);
      if (::testing::Test::HasFatalFailure()) {
        return;
      }
      matched += a.want.total > 0;
      longer += a.want.total > 0 && phrases[qi].size() > 16;
    }
  }
  EXPECT_GT(matched,
            phrases.size());  // most phrases match, in both shards: the test means something
  EXPECT_GT(longer, 0u);      // and some long ones do
}

TEST(phrase_walk_test, batched_walk_answers_as_the_leapfrog_and_the_reference) {
  // Verifies the two-word phrase alone (also the sub-search that counts a phrase for its
  // document frequency), which takes the lead's docs in batches (phrase_walk_eval): for
  // adjacent words of the stories (a rare word beside a common one, either first), the same
  // pairs reversed, pairs of common words and a pair with an absent word, over shards of many
  // blocks, by date with k 1 (the count's) and 33, by relevance with k 10 and 33, and with the
  // first word also standing alone: the same total, docs, order and keys as the
  // leapfrog (prune_enabled off; and as the exhaustive reference, by date and by relevance),
  // whole and in slices of 3
  // and 200 units; and the document frequency it gives equals the reference's total.
  std::string data;
  generate_corpus(8000, 41, [&data](std::string_view c) { data += c; });
  shards none(data, 2, 1000000, 0);  // no pair table: every phrase is walked
  for (local_shard* s : none.local) {
    ASSERT_EQ(s->pair_words(), 0u);
  }
  const std::vector<story_tokens> stories = tokens_of(data);
  std::mt19937_64 rng(19);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (int i = 0; i < 40; ++i) {
    const story_tokens& st = stories[rng() % stories.size()];
    if (st.toks.size() < 2) {
      continue;
    }
    const size_t at = rng() % (st.toks.size() - 1);
    if (st.toks[at] != st.toks[at + 1]) {
      pairs.emplace_back(st.toks[at], st.toks[at + 1]);
      pairs.emplace_back(st.toks[at + 1], st.toks[at]);
    }
  }
  static const char* common[] = {"the", "a", "of", "to", "is"};
  for (const char* a : common) {
    for (const char* b : common) {
      if (std::string_view(a) != b) {
        pairs.emplace_back(a, b);
      }
    }
  }
  pairs.emplace_back("the", "zzqxnotaword");
  answers a;
  uint64_t matched = 0, batched = 0;
  for (const auto& [w1, w2] : pairs) {
    phrase_plan pp(w1, w2);
    pp.phrase_idf = {1.25};
    pp.plan.idf = pp.idf;
    pp.plan.phrase_idf = pp.phrase_idf;
    const std::string what = "\"" + w1 + " " + w2 + "\"";
    std::vector<uint64_t> df(pp.terms.size() + 1, 0);
    uint64_t total = 0;
    for (size_t si = 0; si < none.local.size(); ++si) {
      // by date (k 1: the count's own), by relevance, and with the first word also alone
      for (int variant = 0; variant < 5; ++variant) {
        const uint32_t k = variant == 0 ? 1 : variant % 2 == 1 ? 33 : 10;
        pp.plan.k = k;
        pp.plan.sort = variant < 2 ? sort_order::date : sort_order::relevance;
        pp.idf[0] = variant == 4 ? 0.75 : 0.0;
        const std::string kwhat =
            what + " variant " + std::to_string(variant) + " shard " + std::to_string(si);
        ASSERT_TRUE(none.local[si]->search(pp.plan, a.ws, a.got));
        batched += a.ws.ev.began == eval_state::phrase_walk;
        prune_enabled = false;
        ASSERT_TRUE(none.local[si]->search(pp.plan, a.ws, a.walked));
        prune_enabled = true;
        EXPECT_NE(a.ws.ev.began, eval_state::phrase_walk) << kwhat;
        // the exhaustive reference (it reads every story: once per order), else the leapfrog
        if (variant == 0 || variant == 2) {
          none.local[si]->reference_search(pp.plan, a.want);
          expect_same(a.walked, a.want, kwhat + " leapfrog");
          if (variant == 0) {
            total += a.want.total;
          }
        } else {
          a.want = a.walked;
        }
        expect_same(a.got, a.want, kwhat);
        for (uint64_t budget : {3u, 200u}) {
          bool first = true;
          slice sl = slice::more;
          while (sl == slice::more) {
            uint64_t left = budget;
            sl = none.local[si]->search_slice(pp.plan, a.ws, a.got, first, left);
            first = false;
          }
          expect_same(a.got, a.want, kwhat + " in slices of " + std::to_string(budget));
        }
        if (::testing::Test::HasFatalFailure()) {
          return;
        }
      }
      pp.idf[0] = 0.0;
      pp.plan.sort = sort_order::date;
      // the count's own sub-search (after the searches: it leaves the phrase's docs listed)
      ASSERT_TRUE(none.local[si]->add_doc_freqs(pp.plan, a.ws, df.data()));
    }
    EXPECT_EQ(df.back(), total) << what;
    matched += total > 0;
  }
  EXPECT_GT(matched, pairs.size() / 2);  // most phrases match: the comparison means something
  EXPECT_GT(batched, pairs.size());      // and the batched walk answered most searches
}

}  // namespace
}  // namespace tollgate::search
