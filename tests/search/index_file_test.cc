// The persisted index: a written then mapped index answers every query class exactly as a fresh
// build does; a truncated, bit-flipped, older-format or other-corpus file is rebuilt, never
// served; an unwritable location serves from memory.
#include "tollgate/search/index_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "search/index_file.h"
#include "search/local_shard.h"
#include "tollgate/common/alloc_hold.h"
#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/tollgate-index-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
};

std::string generated(uint64_t count, uint64_t seed) {
  std::string data;
  generate_corpus(count, seed, [&data](std::string_view chunk) { data += chunk; });
  return data;
}

void write_file(const std::string& path, std::string_view data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), data.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Queries of every class drawn from the corpus' own titles and tags: 1-3 terms, phrases,
// phrases with terms, tag and time filters, sort=date, deep offsets, plus stories by id.
struct query_set {
  std::vector<std::string> texts, tags, ids;
  std::vector<query_args> args;
};

// Over 80 lines on purpose: read the corpus once, then draw each kind of query in turn.
query_set draw_queries(const std::string& jsonl, uint64_t seed) {
  query_set qs;
  simdjson::dom::parser parser;
  std::vector<std::vector<std::string>> titles;
  size_t at = 0;
  while (at < jsonl.size() && titles.size() < 300) {
    size_t nl = jsonl.find('\n', at);
    std::string line = jsonl.substr(at, nl - at);
    at = nl + 1;
    simdjson::dom::element e;
    if (parser.parse(line).get(e)) {
      continue;
    }
    std::string_view title, id, tag;
    if (e["title"].get(title) || e["id"].get(id)) {
      continue;
    }
    std::vector<std::string> words;
    std::string w;
    for (char c : title) {
      if (std::isalnum(static_cast<unsigned char>(c))) {
        w += c;
      } else if (!w.empty()) {
        words.push_back(w);
        w.clear();
      }
    }
    if (!w.empty()) {
      words.push_back(w);
    }
    if (words.size() >= 3) {
      titles.push_back(words);
    }
    qs.ids.emplace_back(id);
    simdjson::dom::array tags;
    if (!e["tags"].get(tags) && tags.size() > 0 && !tags.at(0).get(tag)) {
      qs.tags.emplace_back(tag);
    }
  }
  std::mt19937_64 rng(seed);
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  for (int i = 0; i < 120; ++i) {
    const auto& t = titles[pick(titles.size())];
    const size_t k = pick(t.size() - 2);
    switch (i % 6) {
      case 0:
        qs.texts.push_back(t[k]);
        break;
      case 1:
        qs.texts.push_back(t[k] + " " + t[k + 2]);
        break;
      case 2:
        qs.texts.push_back(t[k] + " " + t[k + 1] + " " + t[k + 2]);
        break;
      case 3:
        qs.texts.push_back("\"" + t[k] + " " + t[k + 1] + "\"");
        break;
      case 4:
        qs.texts.push_back("\"" + t[k] + " " + t[k + 1] + "\" " + t[k + 2]);
        break;
      default: {
        // a word beside "the", or the commonest words alone (their impact lists)
        static const char* common[] = {"the of", "a the", "to of in", "the and", "is the a"};
        qs.texts.push_back(i / 6 % 2 == 0 ? "the " + t[k] : common[i / 12 % std::size(common)]);
        break;
      }
    }
  }
  qs.args.resize(qs.texts.size());
  for (size_t i = 0; i < qs.texts.size(); ++i) {
    query_args& a = qs.args[i];
    a.query = qs.texts[i];
    a.limit = static_cast<uint32_t>(1 + pick(max_limit));
    a.offset = i % 5 == 0 ? static_cast<uint32_t>(pick(max_offset + 1)) : 0;
    if (i % 4 == 1) {
      a.sort = sort_order::date;
    }
    if (i % 7 == 2) {
      a.since = 1577836800 + static_cast<int64_t>(pick(60'000'000));  // 2020 on
      a.until = a.since + 40'000'000;
    }
    if (i % 9 == 3 && !qs.tags.empty()) {
      a.add_tag(qs.tags[pick(qs.tags.size())]);
    }
  }
  return qs;
}

// Every query's rendered answer and every story, as one string per item.
std::vector<std::string> answers(const backend& b, const query_set& qs) {
  std::vector<std::string> out;
  auto s = b.make_scratch();
  for (const query_args& a : qs.args) {
    out_buffer o;
    EXPECT_TRUE(b.search_stories(a, *s, o, false).has_value());
    out.emplace_back(o.view());
  }
  for (const std::string& id : qs.ids) {
    out_buffer o;
    EXPECT_TRUE(b.get_story(id, o, false).has_value());
    out.emplace_back(o.view());
  }
  return out;
}

struct fixture {
  temp_dir dir;
  std::string corpus = dir.path + "/stories.jsonl";
  std::string jsonl = generated(3000, 77);
  query_set qs = draw_queries(jsonl, 5);
  std::vector<std::string> fresh;
  load_options opts;
  fixture() {
    write_file(corpus, jsonl);
    opts.shards = 3;
    load_report rep;
    auto b = load_jsonl_file(corpus, opts, rep);
    EXPECT_TRUE(b.has_value());
    fresh = answers(**b, qs);
    size_t empty = 0;
    for (size_t i = 0; i < qs.args.size(); ++i) {
      empty += fresh[i].starts_with("{\"total\":0,") ? 1 : 0;
    }
    EXPECT_LT(empty, qs.args.size() / 4);  // the queries match: the comparison means something
  }
  // load_indexed over `paths`; checks its answers are the fresh build's.
  index_use load(const std::vector<std::string>& paths) {
    index_use use;
    load_report rep;
    auto b = load_indexed(corpus, paths, opts, rep, use);
    EXPECT_TRUE(b.has_value());
    if (b) {
      EXPECT_EQ(rep.loaded, 3000u);
      EXPECT_TRUE(answers(**b, qs) == fresh) << "answers differ (mapped: " << use.mapped << ")";
    }
    return use;
  }
  std::string index() const { return corpus + ".tollgate-index"; }
};

bool note_says(const index_use& use, std::string_view what) {
  for (const std::string& n : use.notes) {
    if (n.find(what) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Loads `paths` (whose file an earlier load wrote), expects it mapped, runs `each` on every
// shard with its slot, and expects every query answered as the fresh build answered it.
template <class Each>
void expect_mapped_answers(fixture& fx, const std::vector<std::string>& paths, Each each) {
  index_use use;
  load_report rep;
  auto b = load_indexed(fx.corpus, paths, fx.opts, rep, use);
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(use.mapped);
  for (size_t i = 0; i < (*b)->local_count(); ++i) {
    each(static_cast<const local_shard&>((*b)->local_shard(i)), i);
  }
  EXPECT_TRUE(answers(**b, fx.qs) == fx.fresh);
}

TEST(index_file_test, written_then_mapped_answers_every_query_class_as_a_fresh_build) {
  // Verifies the first load builds and writes the index beside the corpus, the second maps it,
  // and both answer every query (terms, phrases, filters, sort=date, offsets) and every story
  // byte for byte as a build that never saw an index file.
  fixture fx;
  const auto paths = index_paths(fx.corpus, "");
  ASSERT_EQ(paths.front(), fx.index());
  index_use first = fx.load(paths);
  EXPECT_FALSE(first.mapped);
  EXPECT_EQ(first.path, fx.index());
  EXPECT_TRUE(first.notes.empty());
  ASSERT_TRUE(fs::exists(fx.index()));
  index_use second = fx.load(paths);
  EXPECT_TRUE(second.mapped);
  EXPECT_EQ(second.path, fx.index());
  EXPECT_TRUE(second.notes.empty());
}

TEST(index_file_test, a_first_load_serves_the_file_it_wrote) {
  // Verifies a load that builds and writes the index then serves from that file, mapped, as a
  // later load does (its shards read their impact lists from the file: a build's compute
  // them), with the build's report, and answers every query as a fresh build; and that a load
  // whose file cannot be written serves the build from memory.
  const uint32_t saved = prune_min_lead_df;
  prune_min_lead_df = 0;  // impact lists for the commonest words of these small shards
  {
    fixture fx;
    index_use use;
    load_report rep;
    auto b = load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, fx.opts, rep, use);
    ASSERT_TRUE(b.has_value());
    EXPECT_FALSE(use.mapped);
    EXPECT_TRUE(use.remapped);
    EXPECT_FALSE(use.checked);  // the file it had just written: not read back
    EXPECT_EQ(use.path, fx.index());
    EXPECT_TRUE(use.notes.empty());
    EXPECT_EQ(rep.loaded, 3000u);
    for (size_t i = 0; i < (*b)->local_count(); ++i) {
      const auto& s = static_cast<const local_shard&>((*b)->local_shard(i));
      EXPECT_GT(s.impact_terms(), 0u) << i;
      EXPECT_TRUE(s.impact_from_file()) << i;
      EXPECT_TRUE(s.prune_from_file()) << i;
    }
    EXPECT_TRUE(answers(**b, fx.qs) == fx.fresh);
    const index_use later = fx.load({fx.index()});
    EXPECT_TRUE(later.mapped);
    EXPECT_TRUE(later.checked);  // every later start reads every section's checksum

    // Nowhere to write (a path under a regular file): built, served from memory, not mapped.
    const std::string blocked = fx.dir.path + "/plain-file/x.tollgate-index";
    write_file(fx.dir.path + "/plain-file", "x");
    index_use mem;
    load_report rep2;
    auto m = load_indexed(fx.corpus, std::vector<std::string>{blocked}, fx.opts, rep2, mem);
    ASSERT_TRUE(m.has_value());
    EXPECT_FALSE(mem.mapped);
    EXPECT_FALSE(mem.remapped);
    EXPECT_TRUE(mem.path.empty());
    for (size_t i = 0; i < (*m)->local_count(); ++i) {
      EXPECT_FALSE(static_cast<const local_shard&>((*m)->local_shard(i)).impact_from_file()) << i;
    }
    EXPECT_TRUE(answers(**m, fx.qs) == fx.fresh);
  }
  prune_min_lead_df = saved;
}

// How many of `path`'s pages the page cache holds, and how many it has.
std::pair<size_t, size_t> cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size == 0) {
    if (fd >= 0) {
      ::close(fd);
    }
    return {0, 0};
  }
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const auto size = static_cast<size_t>(st.st_size);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    return {0, 0};
  }
  std::vector<unsigned char> in((size + page - 1) / page, 0);
  size_t cached = 0;
  if (::mincore(m, size, in.data()) == 0) {
    cached = static_cast<size_t>(
        std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; }));
  }
  ::munmap(m, size);
  return {cached, in.size()};
}

TEST(index_file_test, a_first_load_has_the_whole_file_it_wrote_brought_in_behind_it) {
  // Verifies that the first load, which wrote the file past the page cache where the file
  // system allows it and read back only the tables its shards copy, has the rest of the file
  // (streams, heads, lists, rows: what queries read in place) brought into the page cache by
  // the thread that asks for it after the loads, with no query run (which of its loads skip
  // the checks that read whole sections: the_file_just_written_is_trusted_only_while_...).
  fixture fx;
  index_use use;
  load_report rep;
  auto b = load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, fx.opts, rep, use);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(use.remapped);
  EXPECT_FALSE(use.checked);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::pair<size_t, size_t> pages = cached_pages(fx.index());
  while (pages.first < pages.second && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pages = cached_pages(fx.index());
  }
  EXPECT_GT(pages.second, 0u);
  EXPECT_EQ(pages.first, pages.second) << "of the file's pages, cached";
  EXPECT_TRUE(answers(**b, fx.qs) == fx.fresh);
}

TEST(index_file_test, a_mapped_index_prunes_as_a_fresh_build_does) {
  // Verifies that a shard read from an index file, whose finalize() is skipped, still derives
  // the pruning bitsets, so the pruned evaluation answers every query as a fresh build. Pruning
  // is forced on for every query without phrases (these shards hold 1,000 docs, under the
  // default lead threshold).
  const uint32_t saved = prune_min_lead_df;
  prune_min_lead_df = 0;
  {
    fixture fx;
    const auto paths = index_paths(fx.corpus, "");
    EXPECT_FALSE(fx.load(paths).mapped);
    EXPECT_TRUE(fx.load(paths).mapped);
  }
  prune_min_lead_df = saved;
}

TEST(index_file_test, a_mapped_index_takes_its_impact_lists_from_the_file) {
  // Verifies the impact terms' lists and per-doc rows are written and read back in place
  // (not derived again at load), and the mapped shards answer every query (conjunctions of the
  // commonest words among them, pruned) as a fresh build.
  const uint32_t saved = prune_min_lead_df;
  prune_min_lead_df = 0;
  {
    fixture fx;
    const auto paths = index_paths(fx.corpus, "");
    EXPECT_FALSE(fx.load(paths).mapped);
    expect_mapped_answers(fx, paths, [](const local_shard& s, size_t i) {
      EXPECT_GT(s.impact_terms(), 0u) << i;
      EXPECT_TRUE(s.impact_from_file()) << i;
    });
  }
  prune_min_lead_df = saved;
}

TEST(index_file_test, a_mapped_index_takes_its_bitsets_and_filter_tables_from_the_file) {
  // Verifies the prune index's other tables (the dense terms' bitsets, the docs by time, the
  // cumulative time bitsets, the tags' docs, the length classes) are written and read back in
  // place, and the mapped shards answer every query (filters by tag and time and date order
  // among them) as a fresh build; and that a file whose bitsets were made for another density
  // threshold is not taken at its word: its tables are derived again and the answers hold.
  fixture fx;
  const auto paths = index_paths(fx.corpus, "");
  EXPECT_FALSE(fx.load(paths).mapped);
  expect_mapped_answers(
      fx, paths, [](const local_shard& s, size_t i) { EXPECT_TRUE(s.prune_from_file()) << i; });
  const uint32_t saved = dense_divisor;
  dense_divisor = saved * 2;  // more terms are dense than the file's bitsets cover
  expect_mapped_answers(
      fx, paths, [](const local_shard& s, size_t i) { EXPECT_FALSE(s.prune_from_file()) << i; });
  dense_divisor = saved;
}

TEST(index_file_test, a_mapped_pair_table_counts_phrases_as_a_fresh_build_does) {
  // Verifies the table of adjacent pairs is written and read back: built with every sampled
  // word in it, a mapped index answers every query (phrases among them, whose document
  // frequencies come from the table) as a fresh build without it (these shards are too small
  // for the default threshold) counted them by walking the postings.
  fixture fx;
  const uint32_t saved = pair_min_df;
  pair_min_df = 1;
  const auto paths = index_paths(fx.corpus, "");
  EXPECT_FALSE(fx.load(paths).mapped);
  EXPECT_TRUE(fx.load(paths).mapped);
  pair_min_df = saved;
}

TEST(index_file_test, truncated_index_is_rebuilt) {
  // Verifies an index cut short is not served: the note names it, the answers are right, and
  // the rewritten file is mapped by the next load.
  fixture fx;
  fx.load({fx.index()});
  const std::string whole = read_file(fx.index());
  write_file(fx.index(), std::string_view(whole).substr(0, whole.size() / 2));
  index_use use = fx.load({fx.index()});
  EXPECT_FALSE(use.mapped);
  EXPECT_TRUE(note_says(use, "truncated")) << use.notes.size();
  EXPECT_EQ(read_file(fx.index()), whole);
  EXPECT_TRUE(fx.load({fx.index()}).mapped);
}

TEST(index_file_test, bit_flipped_index_is_rebuilt) {
  // Verifies a single flipped bit anywhere in a section (the postings, the stories) or in the
  // header is caught by the checksums and the file rebuilt.
  fixture fx;
  fx.load({fx.index()});
  const std::string whole = read_file(fx.index());
  for (size_t at : {size_t{20}, size_t{4096 + 100}, whole.size() / 3, whole.size() * 2 / 3,
                    whole.size() - 40}) {
    std::string bad = whole;
    bad[at] ^= 0x10;
    write_file(fx.index(), bad);
    index_use use = fx.load({fx.index()});
    EXPECT_FALSE(use.mapped) << "flip at " << at;
    EXPECT_TRUE(note_says(use, "corrupt") || note_says(use, "another corpus")) << "flip at " << at;
    EXPECT_EQ(read_file(fx.index()), whole);
  }
}

TEST(index_file_test, older_format_version_is_rebuilt) {
  // Verifies an index of another format version (header checksum intact) is rebuilt.
  fixture fx;
  fx.load({fx.index()});
  std::string bad = read_file(fx.index());
  const uint32_t older = index_format_version - 1;
  std::memcpy(bad.data() + 8, &older, 4);
  // the header's checksum (its last 8 of 96 bytes) covers the version: recomputed, as the
  // older build would have written it
  index_checksum sum;
  sum.update(bad.data(), 88);
  const uint64_t h = sum.final();
  std::memcpy(bad.data() + 88, &h, 8);
  const std::string good = read_file(fx.index());
  write_file(fx.index(), bad);
  index_use use = fx.load({fx.index()});
  EXPECT_FALSE(use.mapped);
  EXPECT_TRUE(note_says(use, "format version"));
  EXPECT_EQ(read_file(fx.index()), good);
}

TEST(index_file_test, index_of_another_corpus_is_rebuilt) {
  // Verifies an index written for a different corpus at the same path (same size: one byte of
  // a title changed, mtime kept) is not served.
  fixture fx;
  fx.load({fx.index()});
  struct stat before;
  ASSERT_EQ(::stat(fx.corpus.c_str(), &before), 0);
  std::string other = fx.jsonl;
  const size_t at = other.find("\"title\":\"") + 9;
  other[at] = other[at] == 'x' ? 'y' : 'x';
  write_file(fx.corpus, other);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, fx.corpus.c_str(), times, 0), 0);
  index_use use;
  load_report rep;
  auto b = load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, fx.opts, rep, use);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(use.mapped);
  EXPECT_TRUE(note_says(use, "another corpus"));
}

TEST(index_file_test, other_shard_count_or_strict_load_rebuilds) {
  // Verifies an index built for another shard count is not used, and that one built with bad
  // lines skipped is not used by a load that must fail on them (whose build then fails, its
  // temporary index file removed).
  fixture fx;
  fx.load({fx.index()});
  fx.opts.shards = 2;
  index_use use = fx.load({fx.index()});
  EXPECT_FALSE(use.mapped);
  EXPECT_TRUE(note_says(use, "shards"));

  write_file(fx.corpus, fx.jsonl + "not json\n");
  load_options lax = fx.opts;
  index_use u1;
  load_report r1;
  ASSERT_TRUE(
      load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, lax, r1, u1).has_value());
  EXPECT_EQ(r1.skipped, 1u);
  index_use u2;
  load_report r2;
  ASSERT_TRUE(
      load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, lax, r2, u2).has_value());
  EXPECT_TRUE(u2.mapped);
  EXPECT_EQ(r2.skipped, 1u);  // the bad lines are kept in the file, reported again
  ASSERT_EQ(r2.issues.size(), 1u);
  EXPECT_EQ(r2.issues[0].line, 3001u);
  load_options strict = fx.opts;
  strict.skip_bad_lines = false;
  index_use u3;
  load_report r3;
  auto b = load_indexed(fx.corpus, std::vector<std::string>{fx.index()}, strict, r3, u3);
  EXPECT_FALSE(b.has_value());
  EXPECT_TRUE(note_says(u3, "bad lines"));
  // The failed build's file, begun before its parse (written as the shards seal), is gone.
  for (const fs::directory_entry& e : fs::directory_iterator(fx.dir.path)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(index_file_test, unwritable_location_falls_to_the_next_then_serves_from_memory) {
  // Verifies a location that cannot be written is noted, the next candidate takes the index,
  // and with none writable the corpus is served from memory with a note.
  // (a path under a regular file: permission bits would not stop root, which tests run as)
  fixture fx;
  const std::string blocked = fx.dir.path + "/plain-file/x.tollgate-index";
  write_file(fx.dir.path + "/plain-file", "x");
  const std::string data_dir = fx.dir.path + "/data";
  const auto paths = index_paths(fx.corpus, data_dir);
  ASSERT_EQ(paths.size(), 2u);
  index_use a = fx.load({blocked, paths[1]});
  EXPECT_EQ(a.path, paths[1]);
  EXPECT_TRUE(note_says(a, "cannot"));
  EXPECT_TRUE(fs::exists(paths[1]));
  EXPECT_TRUE(fx.load({blocked, paths[1]}).mapped);
  index_use b = fx.load({blocked});
  EXPECT_FALSE(b.mapped);
  EXPECT_TRUE(b.path.empty());
  EXPECT_TRUE(note_says(b, "serving from memory"));
}

TEST(index_file_test, a_write_that_fills_its_disk_mid_build_falls_to_the_next_location) {
  // Verifies the file written while the build goes on: on a file system that fills during it
  // (a real 256 KiB tmpfs: the temporary file is created, its writes then fail), the error is
  // noted, the temporary file removed, and the next candidate takes the index once built (the
  // same bytes a build that wrote there first gives, and a one-thread build, which writes once
  // built); the file is mapped and answers every query as a fresh build.
  fixture fx;
  temp_dir mnt;
  if (::mount("tmpfs", mnt.path.c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  }
  struct unmount {
    const std::string& at;
    ~unmount() { ::umount2(at.c_str(), MNT_DETACH); }  // also when an assertion ends the test
  } unmount_at_end{mnt.path};
  const std::string full = mnt.path + "/x.tollgate-index";
  const std::string next = fx.dir.path + "/next.tollgate-index";
  const index_use use = fx.load({full, next});
  EXPECT_EQ(use.path, next);
  EXPECT_TRUE(use.remapped);
  EXPECT_TRUE(note_says(use, "cannot write " + full)) << (use.notes.empty() ? "" : use.notes[0]);
  EXPECT_TRUE(fs::is_empty(mnt.path));
  const std::string fallen = read_file(next);
  EXPECT_TRUE(fx.load({next}).mapped);
  const std::string first = fx.dir.path + "/first.tollgate-index";
  EXPECT_EQ(fx.load({first}).path, first);
  EXPECT_TRUE(read_file(first) == fallen) << "the two ways of writing give different files";
  // On one thread the file is written once built, not during the build: the same bytes.
  fx.opts.threads = 1;
  const std::string single = fx.dir.path + "/single.tollgate-index";
  EXPECT_EQ(fx.load({single}).path, single);
  EXPECT_TRUE(read_file(single) == fallen) << "a one-thread build writes a different file";
}

TEST(index_file_test, a_dead_writers_temporary_file_is_removed_when_writing) {
  // Verifies a temporary file a crashed writer left (its pid no longer running) is removed by
  // the next write, and one of a running process is left alone.
  fixture fx;
  pid_t dead = 4000000;
  while (::kill(dead, 0) == 0 || errno != ESRCH) {
    ++dead;
  }
  const std::string stale = fx.index() + ".tmp." + std::to_string(dead);
  write_file(stale, "half an index");
  const std::string mine = fx.index() + ".tmp.1";  // pid 1 (init) is always running
  write_file(mine, "someone else's");
  EXPECT_FALSE(fx.load({fx.index()}).mapped);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(mine));
}

TEST(index_file_test, a_strict_load_failing_on_a_duplicate_id_ends_cleanly_on_two_threads) {
  // Verifies that a load that must fail on bad lines, whose only bad line is a duplicate id
  // (found once the shards are sealed, after the file's writing has begun), fails with that
  // line on two threads, by load_indexed and by build_index_file, and leaves no temporary file:
  // the shards it drops are not read by a writer thread afterwards (the asan build's check).
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  std::string jsonl = generated(20000, 91);
  jsonl += jsonl.substr(0, jsonl.find('\n') + 1);  // line 20001: line 1 again
  write_file(corpus, jsonl);
  load_options strict;
  strict.shards = 3;
  strict.threads = 2;
  strict.skip_bad_lines = false;
  index_use use;
  load_report rep;
  auto b =
      load_indexed(corpus, std::vector<std::string>{dir.path + "/stories.idx"}, strict, rep, use);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().line, 20001u);
  EXPECT_NE(b.error().reason.find("duplicate id"), std::string::npos) << b.error().reason;
  auto built = build_index_file(corpus, dir.path + "/built.idx", strict, rep);
  ASSERT_FALSE(built.has_value());
  EXPECT_EQ(built.error().line, 20001u);
  for (const fs::directory_entry& e : fs::directory_iterator(dir.path)) {
    EXPECT_EQ(e.path().filename().string(), "stories.jsonl") << e.path();
  }
}

TEST(index_file_test, a_file_written_as_the_build_goes_is_the_one_written_once_built) {
  // Verifies that the index file written during a build on several threads (each shard's
  // sealed sections as it is sealed, its derived ones as it is finalized, by a writer thread)
  // has the same bytes as the file a build on one thread writes once every shard is done.
  fixture fx;
  fx.opts.shards = 5;
  load_report rep;
  std::string files[3];
  for (const uint32_t threads : {1u, 2u, 3u}) {
    load_options o = fx.opts;
    o.threads = threads;
    const std::string out = fx.dir.path + "/t" + std::to_string(threads) + ".idx";
    ASSERT_TRUE(build_index_file(fx.corpus, out, o, rep).has_value()) << threads;
    files[threads - 1] = read_file(out);
  }
  EXPECT_GT(files[0].size(), 100000u);
  EXPECT_TRUE(files[1] == files[0]);
  EXPECT_TRUE(files[2] == files[0]);
}

TEST(index_file_test, build_index_file_writes_what_load_indexed_maps) {
  // Verifies build_index_file (the deploy pipeline's path) writes a file serve then maps.
  fixture fx;
  const std::string out = fx.dir.path + "/built.idx";
  load_report rep;
  ASSERT_TRUE(build_index_file(fx.corpus, out, fx.opts, rep).has_value());
  EXPECT_EQ(rep.loaded, 3000u);
  EXPECT_TRUE(fx.load({out}).mapped);
  EXPECT_FALSE(build_index_file(fx.dir.path + "/missing.jsonl", out, fx.opts, rep).has_value());
}

// The allocator_hold hooks' calls, in order: 'h' hold, 'r' release.
std::string g_hold_calls;

TEST(index_file_test, a_build_holds_freed_memory_until_it_ends_and_a_mapped_start_does_not) {
  // Verifies an index build runs inside one allocator_hold (the allocator keeps what the
  // build frees until the build ends: main() sets mimalloc's hooks), released before the
  // call returns; a start that maps an existing file takes no hold.
  fixture fx;
  set_allocator_hold_hooks({[] { g_hold_calls += 'h'; }, [] { g_hold_calls += 'r'; }});
  load_report rep;
  ASSERT_TRUE(build_index_file(fx.corpus, fx.dir.path + "/h.idx", fx.opts, rep).has_value());
  EXPECT_EQ(g_hold_calls, "hr");
  g_hold_calls.clear();
  EXPECT_FALSE(fx.load({fx.index()}).mapped);  // built, written, mapped again
  EXPECT_EQ(g_hold_calls, "hr");
  g_hold_calls.clear();
  EXPECT_TRUE(fx.load({fx.index()}).mapped);  // a later start: no build
  EXPECT_EQ(g_hold_calls, "");
  set_allocator_hold_hooks({});
}

TEST(index_file_test, a_build_reports_its_share_done_through_every_stage) {
  // Verifies the progress counters of a build: every story counts each stage's steps once
  // (recorded, sealed, ranked, written), so the share reaches 100% exactly when the file is
  // written and not at the end of the parse; a build served from memory stops short of the
  // writing's steps; before anything, the share is 0, and unknown without the file's size.
  fixture fx;
  std::atomic<uint64_t> stories{0}, bytes{0}, steps{0};
  load_options opts = fx.opts;
  opts.stories_parsed = &stories;
  opts.bytes_parsed = &bytes;
  opts.build_steps = &steps;
  const uint64_t whole = fs::file_size(fx.corpus);
  EXPECT_EQ(build_share(opts, whole), 0.0);
  EXPECT_LT(build_share(opts, 0), 0.0);
  load_report rep;
  ASSERT_TRUE(build_index_file(fx.corpus, fx.dir.path + "/p.idx", opts, rep).has_value());
  EXPECT_EQ(stories.load(), 3000u);
  EXPECT_EQ(bytes.load(), whole);
  EXPECT_EQ(steps.load(), 3000u * build_steps_total);
  EXPECT_DOUBLE_EQ(build_share(opts, whole), 1.0);
  stories = 0;
  bytes = 0;
  steps = 0;
  ASSERT_TRUE(load_jsonl_file(fx.corpus, opts, rep).has_value());
  EXPECT_EQ(steps.load(), 3000u * (build_steps_total - build_steps_written));
  EXPECT_NEAR(build_share(opts, whole),
              0.1 + 0.9 * static_cast<double>(build_steps_total - build_steps_written) /
                        static_cast<double>(build_steps_total),
              1e-12);
}

// Writes sections of `sizes` bytes (a pattern by tag and offset) to `path`; whether the full
// buffers went out with O_DIRECT.
bool write_sections(const std::string& path, const std::vector<size_t>& sizes, bool direct) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  index_writer w(fd, direct);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> b(sizes[i]);
    for (size_t k = 0; k < b.size(); ++k) {
      b[k] = static_cast<uint8_t>((k * 131 + i * 7) ^ (k >> 9));
    }
    w.add(section_tag(1, static_cast<uint32_t>(i + 1)), std::span<const uint8_t>(b));
  }
  EXPECT_EQ(w.finish({corpus_fingerprint{}, 1, 0, 0}), "");
  const bool was_direct = w.direct();
  ::close(fd);
  return was_direct;
}

TEST(index_file_test, direct_and_plain_writes_give_the_same_file) {
  // Verifies the writer's O_DIRECT path (full staging buffers, then the tail and the header as
  // plain writes) writes the same bytes as plain writes, on /tmp and on tmpfs (which takes
  // O_DIRECT only from Linux 6.6 on), and that the file reads back with every section's
  // checksum verified.
  temp_dir dir;
  const size_t stage = index_writer::kStageBytes;
  const std::vector<size_t> sizes = {100, 3 * stage + 12345, 0, 77, stage - 40, 2 * stage, 5};
  const std::string direct_path = dir.path + "/direct.idx", plain_path = dir.path + "/plain.idx";
  const bool direct = write_sections(direct_path, sizes, true);
  EXPECT_FALSE(write_sections(plain_path, sizes, false));
  const std::string plain = read_file(plain_path);
  EXPECT_EQ(read_file(direct_path), plain);
  if (!direct) {
    std::printf("note: %s refused O_DIRECT\n", dir.path.c_str());
  }
  if (fs::is_directory("/dev/shm")) {
    const std::string shm = "/dev/shm/tollgate-index-test-" + std::to_string(::getpid());
    write_sections(shm, sizes, true);
    EXPECT_EQ(read_file(shm), plain);
    fs::remove(shm);
  }
  auto r = index_reader::open(direct_path, corpus_fingerprint{}, 1, 1);
  ASSERT_TRUE(r.has_value()) << r.error();
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::span<const uint8_t> b;
    ASSERT_TRUE(r->bytes(section_tag(1, static_cast<uint32_t>(i + 1)), b));
    EXPECT_EQ(b.size(), sizes[i]);
  }
}

TEST(index_file_test, the_file_reader_reads_what_the_mapping_holds_and_fails_past_a_cut) {
  // Verifies index_file_reader (how a loaded shard reads its stored texts) copies a section's
  // bytes as the mapping shows them, from any offset; and that once the file is cut short
  // under the mapping, a read past the cut is a failure (get_story's "unavailable"), not a
  // fault, while a read before it still succeeds.
  temp_dir dir;
  const size_t stage = index_writer::kStageBytes;
  const std::vector<size_t> sizes = {100, stage + 333, 5000};
  const std::string path = dir.path + "/cut.idx";
  write_sections(path, sizes, false);
  auto r = index_reader::open(path, corpus_fingerprint{}, 1, 1);
  ASSERT_TRUE(r.has_value()) << r.error();
  const index_file_reader f = r->file_reader();
  ASSERT_TRUE(static_cast<bool>(f));
  std::span<const uint8_t> first, big;
  ASSERT_TRUE(r->bytes(section_tag(1, 1), first));
  ASSERT_TRUE(r->bytes(section_tag(1, 2), big));
  for (size_t at : {size_t{0}, size_t{1}, size_t{4095}, stage - 7, big.size() - 900}) {
    std::vector<uint8_t> got(900, 0);
    ASSERT_TRUE(f.read(big.data() + at, got.size(), got.data())) << at;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), big.begin() + static_cast<ptrdiff_t>(at))) << at;
  }
  const auto* base = static_cast<const uint8_t*>(r->mapping().get());
  const auto cut = static_cast<off_t>(big.data() - base) + 4096;  // inside `big`
  ASSERT_EQ(::truncate(path.c_str(), cut), 0);
  std::vector<uint8_t> got(100, 0);
  EXPECT_TRUE(f.read(first.data(), 100, got.data()));
  EXPECT_FALSE(f.read(big.data() + 8192, 100, got.data()));
  EXPECT_FALSE(f.read(big.data() + 4000, 200, got.data()));  // begins before the cut
}

TEST(index_file_test, the_file_just_written_is_trusted_only_while_it_is_that_file) {
  // Verifies index_reader::open skips the checksum pass only for the file whose identity the
  // writer took: a section damaged before that identity was taken (the bytes as "written")
  // goes unread and opens, unchecked; opened without the identity it is caught; and another
  // file renamed over the path (a new inode) is checked in full, whatever identity is given.
  temp_dir dir;
  const std::vector<size_t> sizes = {100, index_writer::kStageBytes + 333, 5000};
  const std::string path = dir.path + "/trusted.idx", other = dir.path + "/other.idx";
  write_sections(path, sizes, false);
  write_sections(other, sizes, false);
  const std::string whole = read_file(path);
  std::string bad = whole;
  bad[whole.size() / 2] ^= 0x40;  // inside the second section
  write_file(path, bad);
  file_identity written;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(identity_of(fd, written));
    ::close(fd);
  }
  auto trusted = index_reader::open(path, corpus_fingerprint{}, 1, 2, &written);
  ASSERT_TRUE(trusted.has_value()) << trusted.error();
  EXPECT_FALSE(trusted->checked());
  EXPECT_TRUE(trusted->written_here());  // its shards' loads skip the checks of contents
  auto plain = index_reader::open(path, corpus_fingerprint{}, 1, 2);
  ASSERT_FALSE(plain.has_value());
  EXPECT_NE(plain.error().find("corrupt"), std::string::npos) << plain.error();

  // Replaced: the damaged copy renamed over the path has another inode.
  write_file(other, bad);
  ASSERT_EQ(::rename(other.c_str(), path.c_str()), 0);
  auto replaced = index_reader::open(path, corpus_fingerprint{}, 1, 2, &written);
  ASSERT_FALSE(replaced.has_value());
  EXPECT_NE(replaced.error().find("corrupt"), std::string::npos) << replaced.error();

  // An intact file opened with an identity that is not its own: checked, and it holds.
  write_file(path, whole);
  auto intact = index_reader::open(path, corpus_fingerprint{}, 1, 2, &written);
  ASSERT_TRUE(intact.has_value()) << intact.error();
  EXPECT_TRUE(intact->checked());
  EXPECT_FALSE(intact->written_here());
}

}  // namespace
}  // namespace tollgate::search
