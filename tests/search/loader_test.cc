#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

#include "search/local_shard.h"
#include "search/map_guard.h"
#include "search/shard_impl.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

constexpr std::string_view good1 = R"({"id":"1","title":"One","time":10})";
constexpr std::string_view good2 =
    R"({"id":"2","title":"Two","time":20,"tags":["a","b"],"text":"x"})";

std::string lines(std::initializer_list<std::string_view> ls) {
  std::string s;
  for (auto l : ls) {
    s += l;
    s += '\n';
  }
  return s;
}

std::string bad_corpus() {
  return lines({
      good1,                                            // 1
      "",                                               // 2 blank: ignored
      R"({"id":"3","title":"Three","time":)",           // 3 invalid JSON
      R"(["not","an","object"])",                       // 4
      R"({"title":"no id","time":1})",                  // 5
      R"({"id":"6","title":"t","time":"soon"})",        // 6
      R"({"id":"7","title":"t","time":1,"tags":[1]})",  // 7
      good2,                                            // 8
      R"({"id":"1","title":"dup","time":5})",           // 9 duplicate of line 1
      "   ",                                            // 10 blank
      R"({"id":12,"title":"numeric id","time":3})",     // 11 numeric id is accepted
      "\x01garbage",                                    // 12
  });
}

TEST(loader_test, skip_mode_counts_and_reports_bad_lines) {
  // Verifies skip mode loads the good lines and reports each bad one with line and reason.
  load_options o;
  o.shards = 2;
  load_report rep;
  auto b = load_jsonl(bad_corpus(), o, rep);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(rep.loaded, 3u);
  EXPECT_EQ(rep.skipped, 7u);
  EXPECT_EQ((*b)->story_count(), 3u);
  ASSERT_EQ(rep.issues.size(), 7u);
  std::vector<uint64_t> lines_seen;
  for (auto& i : rep.issues) {
    lines_seen.push_back(i.line);
  }
  EXPECT_EQ(lines_seen, (std::vector<uint64_t>{3, 4, 5, 6, 7, 9, 12}));
  EXPECT_NE(rep.issues[0].reason.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(rep.issues[1].reason, "not a JSON object");
  EXPECT_EQ(rep.issues[2].reason, "missing required field \"id\"");
  EXPECT_EQ(rep.issues[3].reason, "field \"time\" must be an integer");
  EXPECT_NE(rep.issues[4].reason.find("tags"), std::string::npos);
  EXPECT_EQ(rep.issues[5].reason, "duplicate id \"1\" (first seen on line 1)");
  out_buffer out;
  ASSERT_TRUE((*b)->get_story("12", out, false).has_value());
  out.clear();
  ASSERT_TRUE((*b)->get_story("1", out, false).has_value());
  EXPECT_NE(out.view().find("\"One\""), std::string_view::npos);  // the first occurrence won
}

TEST(loader_test, fail_mode_stops_at_the_first_bad_line) {
  // Verifies fail mode returns the first bad line's number and reason.
  load_options o;
  o.skip_bad_lines = false;
  load_report rep;
  auto b = load_jsonl(bad_corpus(), o, rep);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().line, 3u);
  EXPECT_NE(b.error().reason.find("invalid JSON"), std::string::npos);
}

TEST(loader_test, duplicate_tags_are_dropped_in_order_past_the_scan_limit_too) {
  // Verifies tag de-duplication keeps the first of each in order, both within the first 32
  // (scanned) and past them (a set), and that a story with 50,000 tags loads (it used to take
  // seconds of quadratic comparisons; here only that it loads whole).
  std::string tags;
  std::string want;
  for (int i = 0; i < 40; ++i) {
    tags += fmt::format("\"t{}\",", i);
    want += fmt::format("\"t{}\",", i);
    if (i == 3 || i == 35) {
      tags += "\"t1\",\"t34\",";  // t34 is not yet seen at i == 3: kept there, dropped later
      if (i == 3) {
        want += "\"t34\",";
      }
    }
  }
  tags += "\"t0\",\"t39\",\"last\"";
  want += "\"last\"";
  std::string many;
  for (int i = 0; i < 50000; ++i) {
    many += fmt::format("{}\"m{}\"", i == 0 ? "" : ",", i % 25000);
  }
  const std::string l1 = R"({"id":"1","title":"t","time":1,"tags":[)" + tags + "]}";
  const std::string l2 = R"({"id":"2","title":"u","time":2,"tags":[)" + many + "]}";
  load_options o;
  load_report rep;
  auto b = load_jsonl(lines({l1, l2}), o, rep);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(rep.skipped, 0u);
  out_buffer out;
  ASSERT_TRUE((*b)->get_story("1", out, false).has_value());
  std::string got(out.view());
  // t34 appears once, where it was first given (after t3), not again after t34's own turn.
  std::string expect_order = want;
  expect_order.erase(expect_order.find("\"t34\",", expect_order.find("\"t33\",")), 6);
  EXPECT_NE(got.find("\"tags\":[" + expect_order + "]"), std::string::npos) << got;
  out.clear();
  ASSERT_TRUE((*b)->get_story("2", out, false).has_value());
  std::string second(out.view());
  EXPECT_NE(second.find("\"m24999\"]"), std::string::npos);
  EXPECT_EQ(second.find("\"m0\"", second.find("\"m0\"") + 1), std::string::npos);
}

TEST(loader_test, a_text_is_read_where_the_line_holds_it_or_copied_when_escaped) {
  // Verifies each story's text is the one its own "text" field gives: a text with escapes; a
  // text whose bytes also follow a "text" key nested in another field and sit quoted inside
  // the title; a key written with spaces around its colon; the last line, without a line end.
  // Each answers get_story with its own text and is found by a word only its text holds.
  const std::string l1 =
      R"({"id":"1","title":"t","time":1,"text":"first \"quoted\" line\nwordone"})";
  const std::string l2 =
      R"({"id":"2","title":"a \"text\":\"wordtwo is","time":2,"meta":{"text":"wordtwo"},)"
      R"("text":"wordtwo is here"})";
  const std::string l3 = R"({"id":"3","title":"u","time":3,"text" : "wordthree spaced"})";
  const std::string l4 = R"({"id":"4","title":"v","time":4,"text":"wordfour at the end"})";
  load_options o;
  load_report rep;
  auto b = load_jsonl(lines({l1, l2, l3}) + l4, o, rep);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(rep.loaded, 4u) << (rep.issues.empty() ? "" : rep.issues[0].reason);
  const std::pair<const char*, const char*> want[] = {
      {"1", R"("text":"first \"quoted\" line\nwordone"})"},
      {"2", R"("text":"wordtwo is here"})"},
      {"3", R"("text":"wordthree spaced"})"},
      {"4", R"("text":"wordfour at the end"})"},
  };
  for (const auto& [id, text] : want) {
    out_buffer out;
    ASSERT_TRUE((*b)->get_story(id, out, false).has_value()) << id;
    const std::string got(out.view());
    EXPECT_NE(got.find(text), std::string::npos) << got;
  }
  auto scratch = (*b)->make_scratch();
  for (const auto& [word, id] : {std::pair{"wordone", "1"}, std::pair{"here", "2"},
                                 std::pair{"spaced", "3"}, std::pair{"end", "4"}}) {
    query_args a;
    a.query = word;
    out_buffer page;
    ASSERT_TRUE((*b)->search_stories(a, *scratch, page, false).has_value());
    EXPECT_NE(std::string(page.view()).find(std::string("\"id\":\"") + id + "\""),
              std::string::npos)
        << word << ": " << page.view();
  }
}

TEST(loader_test, fail_mode_reports_duplicates) {
  // Verifies a duplicate id fails the load in fail mode, naming the later line.
  load_options o;
  o.skip_bad_lines = false;
  load_report rep;
  auto b = load_jsonl(lines({good1, good2, R"({"id":"2","title":"again","time":1})"}), o, rep);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().line, 3u);
  EXPECT_EQ(b.error().reason, "duplicate id \"2\" (first seen on line 2)");
}

TEST(loader_test, survives_hostile_input) {
  // Verifies arbitrary bytes, CRLF endings, a missing final newline and huge lines never crash.
  std::string s =
      "\r\n" + std::string(good1) + "\r\n{\"id\":\"x\xff\",\"title\":\"t\",\"time\":1}\n";
  s += std::string(100000, '[') + "\n";
  s += std::string("\0\0\0", 3) + "\n";
  s += good2;  // no newline at the end
  load_options o;
  load_report rep;
  auto b = load_jsonl(s, o, rep);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(rep.loaded, 2u);
  EXPECT_EQ(rep.skipped, 3u);
}

TEST(loader_test, missing_file_is_reported_as_line_zero) {
  // Verifies an unreadable file fails with line 0 and the path in the reason.
  load_report rep;
  auto b = load_jsonl_file("/nonexistent/stories.jsonl", load_options{}, rep);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().line, 0u);
  EXPECT_NE(b.error().reason.find("/nonexistent/stories.jsonl"), std::string::npos);
}

std::string generate(uint64_t count, uint64_t seed);

// The search payload of `b` for `q` (raw form, limit 50), for comparing two loads.
std::string payload(const backend& b, std::string_view q) {
  auto s = b.make_scratch();
  query_args a;
  a.query = q;
  a.limit = 50;
  out_buffer out;
  EXPECT_TRUE(b.search_stories(a, *s, out, false).has_value());
  return std::string(out.view());
}

TEST(loader_test, file_load_equals_text_load) {
  // Verifies loading a file (mapped, lines parsed in place except the last ones, which are
  // copied for simdjson's padding) gives the same stories as loading its text, with and without
  // a final newline, and that an empty file loads nothing.
  const std::string text = generate(300, 3);
  const std::string path = ::testing::TempDir() + "loader_test_stories.jsonl";
  for (const std::string& body : {text, text.substr(0, text.size() - 1)}) {
    {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(std::fwrite(body.data(), 1, body.size(), f), body.size());
      std::fclose(f);
    }
    load_options o;
    o.shards = 3;
    load_report from_file, from_text;
    auto a = load_jsonl_file(path, o, from_file);
    auto b = load_jsonl(body, o, from_text);
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(from_file.loaded, 300u);
    EXPECT_EQ(from_text.loaded, 300u);
    for (std::string_view q : {"the", "rust", "linux kernel"}) {
      EXPECT_EQ(payload(**a, q), payload(**b, q)) << q;
    }
  }
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  load_report rep;
  auto e = load_jsonl_file(path, load_options{}, rep);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(rep.loaded, 0u);
  std::remove(path.c_str());
}

std::string generate(uint64_t count, uint64_t seed) {
  std::string s;
  generate_corpus(count, seed, [&s](std::string_view c) { s += c; });
  return s;
}

TEST(generator_test, same_seed_same_bytes) {
  // Verifies the generator is deterministic and the seed changes the output.
  EXPECT_EQ(generate(500, 7), generate(500, 7));
  EXPECT_NE(generate(500, 7), generate(500, 8));
  std::string big = generate(700, 7);
  EXPECT_EQ(big.substr(0, generate(500, 7).size()), generate(500, 7));  // a prefix
}

TEST(generator_test, output_loads_cleanly_with_realistic_shape) {
  // Verifies every generated line loads, and titles/texts have the documented word counts.
  std::string s = generate(2000, 3);
  load_options o;
  o.skip_bad_lines = false;
  load_report rep;
  auto b = load_jsonl(s, o, rep);
  ASSERT_TRUE(b.has_value()) << b.error().line << ": " << b.error().reason;
  EXPECT_EQ(rep.loaded, 2000u);
  simdjson::dom::parser p;
  std::istringstream in(s);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    simdjson::padded_string ps(line);
    simdjson::dom::element e;
    ASSERT_FALSE(p.parse(ps).get(e));
    std::string_view title = e["title"].get_string().value_unsafe();
    std::string_view text = e["text"].get_string().value_unsafe();
    auto words = [](std::string_view t) {
      size_t w = 0;
      bool in_word = false;
      for (char c : t) {
        bool sp = c == ' ' || c == '\n';
        w += !sp && !in_word;
        in_word = !sp;
      }
      return w;
    };
    EXPECT_GE(words(title), 4u);
    EXPECT_LE(words(title), 14u);
    EXPECT_GE(words(text), 20u);
    EXPECT_LE(words(text), 300u + 40);  // quotes and commas may stand alone
    ++n;
  }
  EXPECT_EQ(n, 2000);
}

TEST(corpus_command_test, usage_errors_exit_2_and_help_exits_0) {
  // Verifies bad usage returns 2 and --help returns 0.
  auto run = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    return run_corpus_command(static_cast<int>(argv.size()), argv.data());
  };
  EXPECT_EQ(run({"corpus"}), 2);
  EXPECT_EQ(run({"corpus", "frobnicate"}), 2);
  EXPECT_EQ(run({"corpus", "generate"}), 2);
  EXPECT_EQ(run({"corpus", "generate", "--count"}), 2);
  EXPECT_EQ(run({"corpus", "generate", "--count", "-5"}), 2);
  EXPECT_EQ(run({"corpus", "generate", "--count", "5", "--bogus"}), 2);
  EXPECT_EQ(run({"corpus", "--help"}), 0);
  EXPECT_EQ(run({"corpus", "generate", "--help"}), 0);
  EXPECT_EQ(run({"corpus", "generate", "--count=0", "--seed", "9"}), 0);
}

}  // namespace
}  // namespace tollgate::search

namespace tollgate::search {
namespace {

// A generated corpus of 400 stories (~400 KB: several parse pieces) with bad lines and
// duplicates spread over it, a duplicate's first occurrence lying in an earlier piece.
std::string corpus_with_faults() {
  std::string gen;
  generate_corpus(400, 7, [&gen](std::string_view c) { gen += c; });
  std::vector<std::string> ls;
  for (size_t at = 0; at < gen.size();) {
    size_t nl = gen.find('\n', at);
    ls.push_back(gen.substr(at, nl - at));
    at = nl + 1;
  }
  std::string first_id = ls[0].substr(7, ls[0].find('"', 7) - 7);  // {"id":"...
  ls.insert(ls.begin() + 50, R"({"id":"bad","title":"t","time":"soon"})");
  ls.insert(ls.begin() + 200, "");
  ls.insert(ls.begin() + 250, "{\"id\":\"" + first_id + "\",\"title\":\"dup\",\"time\":5}");
  ls.insert(ls.begin() + 390, "not json");
  std::string out;
  for (auto& l : ls) {
    out += l;
    out += '\n';
  }
  return out;
}

std::string search_page(const backend& b, std::string_view q) {
  auto s = b.make_scratch();
  out_buffer out;
  query_args a;
  a.query = q;
  a.limit = 50;
  EXPECT_TRUE(b.search_stories(a, *s, out, false).has_value());
  return std::string(out.view());
}

TEST(loader_test, parallel_parse_matches_single_thread) {
  // Verifies parsing the text in pieces on several threads gives the same report, line numbers
  // and search results as one thread.
  std::string data = corpus_with_faults();
  load_options o1;
  o1.threads = 1;
  load_report r1;
  auto b1 = load_jsonl(data, o1, r1);
  ASSERT_TRUE(b1.has_value());
  EXPECT_EQ(r1.loaded, 400u);
  EXPECT_EQ(r1.skipped, 3u);
  for (uint32_t threads : {2u, 3u, 7u}) {
    load_options o;
    o.threads = threads;
    load_report r;
    auto b = load_jsonl(data, o, r);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(r.loaded, r1.loaded);
    EXPECT_EQ(r.skipped, r1.skipped);
    ASSERT_EQ(r.issues.size(), r1.issues.size());
    for (size_t i = 0; i < r.issues.size(); ++i) {
      EXPECT_EQ(r.issues[i].line, r1.issues[i].line);
      EXPECT_EQ(r.issues[i].reason, r1.issues[i].reason);
    }
    EXPECT_EQ((*b)->story_count(), (*b1)->story_count());
    for (std::string_view q : {"the", "the of", "a and to", "\"of the\""}) {
      EXPECT_EQ(search_page(**b, q), search_page(**b1, q)) << threads << " threads: " << q;
    }
  }
  std::vector<uint64_t> lines_seen;
  for (auto& i : r1.issues) {
    lines_seen.push_back(i.line);
  }
  EXPECT_EQ(lines_seen, (std::vector<uint64_t>{51, 251, 391}));
  EXPECT_NE(r1.issues[1].reason.find("(first seen on line 1)"), std::string::npos);
}

TEST(loader_test, built_shards_come_finalized_with_the_average_of_them_all) {
  // Verifies that build_shards() finalizes every shard it returns with the statistics of them
  // all (duplicates dropped), on one thread and on several (where a thread done sealing
  // finalizes the shards sealed so far as soon as every shard is tokenized), so that a backend
  // over them has nothing left to do; and that the progress counts each stage once per story.
  const std::string data = corpus_with_faults();
  for (uint32_t threads : {1u, 2u, 3u}) {
    load_options o;
    o.threads = threads;
    o.shards = 5;
    std::atomic<uint64_t> steps{0};
    o.build_steps = &steps;
    load_report r;
    auto shards = build_shards(data, o, r);
    ASSERT_TRUE(shards.has_value());
    ASSERT_EQ(shards->size(), 5u);
    shard_stats all;
    for (const auto& s : *shards) {
      all.docs += s->stats().docs;
      all.title_tokens += s->stats().title_tokens;
      all.text_tokens += s->stats().text_tokens;
    }
    EXPECT_EQ(all.docs, r.loaded);
    shard_stats one = (*shards)[0]->stats();  // another average: one shard's own
    ASSERT_NE(average_length(one), average_length(all));
    for (const auto& s : *shards) {
      const auto* ls = dynamic_cast<const local_shard*>(s.get());
      ASSERT_NE(ls, nullptr);
      EXPECT_TRUE(ls->finalized_with(all)) << threads << " threads";
      EXPECT_FALSE(ls->finalized_with(one)) << threads << " threads";
    }
    EXPECT_EQ(steps.load(), r.loaded * (build_steps_total - build_steps_written)) << threads;
  }
}

TEST(loader_test, parallel_fail_mode_reports_the_first_bad_line) {
  // Verifies fail mode on several threads names the earliest bad line, whichever piece it is in.
  std::string data = corpus_with_faults();
  for (uint32_t threads : {1u, 3u}) {
    load_options o;
    o.threads = threads;
    o.skip_bad_lines = false;
    load_report r;
    auto b = load_jsonl(data, o, r);
    ASSERT_FALSE(b.has_value());
    EXPECT_EQ(b.error().line, 51u);
    EXPECT_EQ(b.error().reason, "field \"time\" must be an integer");
  }
  // Only the late bad line and the duplicate: the duplicate (earlier) wins.
  std::string tail_only = data;
  tail_only.replace(tail_only.find(R"({"id":"bad","title":"t","time":"soon"})"),
                    std::string_view(R"({"id":"bad","title":"t","time":"soon"})").size(), "  ");
  load_options o;
  o.threads = 3;
  o.skip_bad_lines = false;
  load_report r;
  auto b = load_jsonl(tail_only, o, r);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(b.error().line, 391u);  // bad JSON fails while parsing, before duplicates are seen
}

TEST(loader_death_test, a_mapped_corpus_that_shrinks_under_the_load_is_a_clear_error) {
  // Verifies that reading a page of a mapped corpus file past its new end, after the file was
  // truncated, exits 2 with the guard's message (the load's error for this case) instead of
  // dying with SIGBUS; and that without the guard the same read is still a SIGBUS.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  char path[] = "/tmp/tollgate-map-guard-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text(3 * 4096, 'x');
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  void* m = ::mmap(nullptr, text.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(::ftruncate(fd, 100), 0);  // the last two pages are gone
  const volatile char* last = static_cast<const char*>(m) + text.size() - 1;
  EXPECT_EXIT(
      {
        const map_guard guard(m, text.size(), "corpus shrank under the load\n");
        (void)*last;
      },
      ::testing::ExitedWithCode(2), "corpus shrank under the load");
  // Unguarded: killed by SIGBUS (or, under a sanitizer that reports the fault itself, exited
  // non-zero), never the guard's clean exit 2.
  auto died_of_the_fault = [](int status) {
    return (WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
           (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 2);
  };
  EXPECT_EXIT({ (void)*last; }, died_of_the_fault, "");
  EXPECT_EQ(static_cast<const char*>(m)[0], 'x');  // the page still inside the file reads
  ::munmap(m, text.size());
  ::close(fd);
  ::unlink(path);
}

TEST(loader_test, build_threads_follow_the_affinity_mask) {
  // Verifies the loading and build threads number the CPUs the process may run on (taskset,
  // a cpuset), not the machine's: pinned to one CPU, one thread.
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) {
    ++first;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  EXPECT_EQ(usable_cpus(), 1u);
  ASSERT_EQ(::sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(usable_cpus(), static_cast<uint32_t>(CPU_COUNT(&saved)));
}

TEST(loader_test, a_freed_story_arena_lends_its_pages_to_the_next_build_block) {
  // Verifies a large build block given back (a shard's story arena after packing) has its
  // written pages moved into the next large alloc_build, not faulted in afresh: that block
  // starts with the bytes the old one held, and the rest of it is usable memory. A small block
  // is simply freed, and what no block took is freed by drop_spare_build_pages().
  constexpr size_t mb = size_t{1} << 20;
  constexpr size_t page = 4096;
  char* a = static_cast<char*>(detail::alloc_build(8 * mb));
  for (size_t i = 0; i < 8 * mb; i += page) {
    a[i] = static_cast<char>(1 + (i / page) % 251);
  }
  detail::recycle_build(a);
  detail::recycle_build(std::malloc(100));
  char* b = static_cast<char*>(detail::alloc_build(16 * mb + 5));
  size_t kept = 0;
  for (size_t i = 0; i < 8 * mb; i += page) {
    kept += b[i] == static_cast<char>(1 + (i / page) % 251) ? 1 : 0;
  }
  EXPECT_EQ(kept, 8 * mb / page);
  std::memset(b, 7, 16 * mb + 5);
  EXPECT_EQ(b[16 * mb + 4], 7);
  std::free(b);
  char* c = static_cast<char*>(detail::alloc_build(8 * mb));
  detail::recycle_build(c);
  detail::drop_spare_build_pages();
  char* d = static_cast<char*>(detail::alloc_build(4 * mb));
  std::memset(d, 1, 4 * mb);
  std::free(d);
}

TEST(loader_test, a_block_lending_its_pages_never_leaves_a_hole_another_thread_can_map) {
  // Verifies the range of a block whose pages move to a new build block stays mapped throughout
  // (the move and the refill are one step): while the main thread lends a 16 MB block's first
  // 8 MB over and over, another thread keeps asking for a mapping exactly at the start of the
  // lent range (MAP_FIXED_NOREPLACE: granted only where nothing is mapped). Were there a
  // moment between moving the pages out and mapping fresh ones in, that thread (or any
  // thread's malloc) could be given the range, and the refill would replace its pages. Run in
  // a child: with the fault present the memory of the child is no longer sound.
  //
  // A grant counts only when the lending was under way from before the prober read the address
  // until after its mmap returned (`window` odd and unchanged): the block is freed after each
  // lending, so a prober held up between reading the address and asking for it (a loaded
  // machine) is rightly given the freed range, and that grant is given back.
  constexpr size_t mb = size_t{1} << 20;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<char*> target{nullptr};
    std::atomic<uint32_t> window{0};  // odd while a lending is under way
    std::atomic<bool> stop{false};
    std::atomic<int> granted{0};
    std::thread prober([&] {
      while (!stop.load()) {
        const uint32_t w = window.load();
        char* t = target.load();
        if ((w & 1) == 0 || t == nullptr) {
          continue;
        }
        void* got = ::mmap(t, 2 * mb, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        const bool within = window.load() == w;
        if (got == t && within) {
          granted.fetch_add(1);  // left mapped: the child ends below either way
          return;
        }
        if (got != MAP_FAILED) {
          ::munmap(got, 2 * mb);  // granted after the lending, or taken as a mere hint
        }
      }
    });
    for (int round = 0; round < 100 && granted.load() == 0; ++round) {
      char* a = static_cast<char*>(detail::alloc_build(16 * mb));
      std::memset(a, 1, 16 * mb);
      detail::recycle_build(a);
      target.store(a);
      window.fetch_add(1);
      char* b = static_cast<char*>(detail::alloc_build(8 * mb));  // takes a's first 8 MB
      window.fetch_add(1);
      target.store(nullptr);
      std::free(b);
      detail::drop_spare_build_pages();  // a, with its last 8 MB, is freed here
    }
    stop.store(true);
    prober.join();
    std::_Exit(granted.load() == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "another thread was given part of a lent block's range";
}

}  // namespace
}  // namespace tollgate::search
