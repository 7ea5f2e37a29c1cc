// Stored texts (src/search/story_pack.cc): a shard whose texts are compressed renders every
// story, summary and full, byte for byte as one whose texts are stored raw, fresh and mapped
// from an index file; a flipped bit in a compressed text is caught by the section checksums; a
// text that still does not decompress fails its own get_story with an error, never the process.
// A shard built from a corpus file leaves the texts there and renders the same; a corpus
// changed in place fails the changed stories' get_story, never answers another story's text.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "search/index_file.h"
#include "search/local_shard.h"
#include "search/test_corpus.h"
#include "support/page_cache.h"
#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"

namespace tollgate::search {
namespace {

using namespace test_support;
namespace fs = std::filesystem;

// A directory of its own under `under`, removed with what it holds; path empty when it could
// not be made.
struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& under = "/tmp") {
    std::string tmpl = under + "/tollgate-story-pack-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) {
      path = tmpl;
    }
  }
  ~temp_dir() {
    if (!path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

void write_file(const std::string& path, std::string_view data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), data.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Stories whose texts test the edges: empty, shorter than a frame is worth, non-ASCII and
// control characters (escaped when rendered), long (several zstd blocks), incompressible.
std::vector<mini_story> edge_stories() {
  std::string long_text;
  for (int i = 0; i < 20000; ++i) {
    long_text += "paragraph " + std::to_string(i * 7919 % 10007) + " of the long story; ";
  }
  std::string noise;
  uint64_t x = 88172645463325252ULL;
  for (int i = 0; i < 3000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    noise += static_cast<char>('!' + x % 90);  // printable, no pattern to find
  }
  return {
      {"edge-empty", "A story with no text", ""},
      {"edge-short", "A short text", "tiny"},
      {"edge-unicode", "Ünïcødé title — 東京",
       "line one\nline two\ttab \x01 ctrl — ünïcødé 東京 \"quoted\" back\\slash "
       "ünïcødé ünïcødé ünïcødé 東京 東京 東京 more words to make it worth packing"},
      {"edge-long", "A long story", long_text},
      {"edge-noise", "Noise", noise},
  };
}

// The corpus: generated stories (enough per shard for a dictionary) and the edge stories.
std::string corpus_text(uint64_t count) {
  std::string data;
  generate_corpus(count, 11, [&data](std::string_view chunk) { data += chunk; });
  return data + to_jsonl(edge_stories());
}

std::vector<std::string> ids_of(const std::string& jsonl) {
  std::vector<std::string> ids;
  for (size_t at = 0; (at = jsonl.find("{\"id\":\"", at)) != std::string::npos;) {
    at += 7;
    ids.push_back(jsonl.substr(at, jsonl.find('"', at) - at));
  }
  return ids;
}

// Every story as get_story renders it (the text included), then a page of summaries per
// query (the short fields every hit renders).
std::vector<std::string> renders(const backend& b, const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  for (const std::string& id : ids) {
    out_buffer o;
    EXPECT_TRUE(b.get_story(id, o, false).has_value()) << id;
    out.emplace_back(o.view());
  }
  auto s = b.make_scratch();
  for (const char* q : {"the", "story", "long story", "ünïcødé", "kubernetes rust"}) {
    query_args a;
    a.query = q;
    a.limit = 50;
    out_buffer o;
    EXPECT_TRUE(b.search_stories(a, *s, o, false).has_value());
    out.emplace_back(o.view());
  }
  return out;
}

// How a backend's shards hold their texts.
enum class texts { raw, packed, in_corpus };

// A backend loaded from `corpus` through load_indexed with its texts held as `how`.
std::unique_ptr<backend> load(const std::string& corpus, const std::vector<std::string>& paths,
                              texts how, index_use& use) {
  const bool saved = pack_texts, saved_corpus = texts_from_corpus;
  pack_texts = how == texts::packed;
  texts_from_corpus = how == texts::in_corpus;
  load_options opts;
  opts.shards = 3;
  load_report rep;
  auto b = load_indexed(corpus, paths, opts, rep, use);
  pack_texts = saved;
  texts_from_corpus = saved_corpus;
  EXPECT_TRUE(b.has_value());
  return b ? std::move(*b) : nullptr;
}

size_t packed_texts(const backend& b) {
  size_t k = 0;
  for (size_t i = 0; i < b.local_count(); ++i) {
    k += static_cast<const local_shard&>(b.local_shard(i)).packed_texts();
  }
  return k;
}

TEST(story_pack_test, packed_shards_render_every_story_as_raw_ones_fresh_and_mapped) {
  // Verifies every story (full text: empty, short, non-ASCII, long, incompressible) and every
  // page of summaries renders byte for byte as in shards whose texts are stored raw, both
  // from a fresh build that packs the texts and from the index file it wrote, mapped.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(3000);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  ASSERT_EQ(ids.size(), 3005u);
  index_use use;
  auto raw = load(corpus, {}, texts::raw, use);
  ASSERT_TRUE(raw);
  EXPECT_EQ(packed_texts(*raw), 0u);
  const std::vector<std::string> want = renders(*raw, ids);
  EXPECT_NE(want[ids.size() - 2].find("paragraph 7919 of the long story"), std::string::npos);

  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  auto fresh = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(fresh);
  EXPECT_FALSE(use.mapped);
  EXPECT_EQ(use.path, paths[0]);
  // the generated texts and the long one compress; the empty, short and noisy ones do not
  EXPECT_GT(packed_texts(*fresh), 2900u);
  EXPECT_LE(packed_texts(*fresh), 3003u);  // never the empty or the short one
  EXPECT_TRUE(renders(*fresh, ids) == want) << "a fresh packed build renders differently";

  auto mapped = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(mapped);
  EXPECT_TRUE(use.mapped);
  EXPECT_EQ(packed_texts(*mapped), packed_texts(*fresh));
  EXPECT_TRUE(renders(*mapped, ids) == want) << "a mapped packed index renders differently";
}

size_t memory_bytes(const backend& b) {
  size_t n = 0;
  for (size_t i = 0; i < b.local_count(); ++i) {
    n += static_cast<const local_shard&>(b.local_shard(i)).memory_bytes();
  }
  return n;
}

TEST(story_pack_test, a_mapped_shard_reports_the_bytes_a_fresh_one_does) {
  // Verifies memory_bytes() counts what a shard loaded from an index file reads in place (its
  // stories' short fields, the texts' offsets and dictionary, in the mapping) as a freshly
  // built shard counts them in its own memory: the two figures agree within 0.5% (they were
  // 3.4% apart when the mapped stories and text offsets went uncounted).
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  write_file(corpus, corpus_text(2000));
  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  index_use use;
  auto fresh = load(corpus, paths, texts::packed, use);
  auto mapped = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(fresh && mapped);
  ASSERT_TRUE(use.mapped);
  const double f = static_cast<double>(memory_bytes(*fresh));
  const double m = static_cast<double>(memory_bytes(*mapped));
  EXPECT_NEAR(m / f, 1.0, 0.005) << "fresh " << f << " B, mapped " << m << " B";
}

TEST(story_pack_test, the_index_reports_its_bytes_by_part_and_packed_stories_take_less) {
  // Verifies the index's report by part adds up to the file's size, is the same written and
  // mapped, and that packed stories take well under the raw ones' bytes in the file.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  write_file(corpus, corpus_text(2000));
  auto total = [](const index_parts& p) { return p.stories + p.postings + p.positions + p.other; };
  index_use raw, written, mapped;
  load(corpus, {dir.path + "/raw.idx"}, texts::raw, raw);
  load(corpus, {dir.path + "/packed.idx"}, texts::packed, written);
  load(corpus, {dir.path + "/packed.idx"}, texts::packed, mapped);
  ASSERT_FALSE(written.mapped);
  ASSERT_TRUE(mapped.mapped);
  EXPECT_EQ(total(raw.parts), fs::file_size(dir.path + "/raw.idx"));
  EXPECT_EQ(total(written.parts), fs::file_size(dir.path + "/packed.idx"));
  EXPECT_EQ(mapped.parts.stories, written.parts.stories);
  EXPECT_EQ(mapped.parts.postings, written.parts.postings);
  EXPECT_EQ(mapped.parts.positions, written.parts.positions);
  EXPECT_EQ(mapped.parts.other, written.parts.other);
  EXPECT_GT(written.parts.postings, 0u);
  EXPECT_GT(written.parts.positions, 0u);
  EXPECT_EQ(written.parts.postings, raw.parts.postings);
  EXPECT_LT(written.parts.stories, raw.parts.stories * 3 / 4);
  EXPECT_NE(written.parts.per_story(2005).find("per story: stories "), std::string::npos);
}

TEST(story_pack_test, the_size_report_reads_right_from_empty_to_large) {
  // Verifies the report `index build` and `serve` print: bytes per story by part, the size in
  // units that show it (not "0 MB" for a small corpus), and no division by zero stories.
  const index_parts big{600'000'000, 640'000'000, 140'000'000, 48'000'000};
  EXPECT_EQ(big.per_story(1'000'000),
            "1428 MB; per story: stories 600 B, postings 640 B, positions 140 B, other 48 B");
  const index_parts small{300'000, 200'000, 40'000, 10'000};
  EXPECT_EQ(small.per_story(1000),
            "0.6 MB; per story: stories 300 B, postings 200 B, positions 40 B, other 10 B");
  const index_parts empty{0, 80, 64, 41'000};
  EXPECT_EQ(empty.per_story(0), "41 KB; no stories");
}

TEST(story_pack_test, shards_too_small_for_a_dictionary_pack_without_one) {
  // Verifies shards of a few stories (no dictionary: too few sample bytes) still compress the
  // texts that gain and render every story as raw shards do.
  const std::vector<mini_story> stories = edge_stories();
  std::vector<std::string> ids;
  for (const mini_story& s : stories) {
    ids.push_back(s.id);
  }
  auto packed = make_backend(stories, 2);
  const bool saved = pack_texts;
  pack_texts = false;
  auto raw = make_backend(stories, 2);
  pack_texts = saved;
  ASSERT_TRUE(packed && raw);
  EXPECT_GE(packed_texts(*packed), 2u);  // the long text and the non-ASCII one
  EXPECT_EQ(packed_texts(*raw), 0u);
  EXPECT_TRUE(renders(*packed, ids) == renders(*raw, ids));
}

TEST(story_pack_test, a_flipped_bit_in_a_compressed_text_is_caught_and_rebuilt) {
  // Verifies a bit flipped inside a compressed text (a zstd frame in the index file) fails
  // the section checksums: the file is not served but rebuilt, and the stories render right.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(1500);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  index_use use;
  auto first = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(first);
  const std::vector<std::string> want = renders(*first, ids);
  const std::string whole = read_file(paths[0]);
  // a frame's magic number (28 B5 2F FD): the texts are the only frames in the file
  const size_t frame = whole.find("\x28\xB5\x2F\xFD");
  ASSERT_NE(frame, std::string::npos);
  std::string bad = whole;
  bad[frame + 12] ^= 0x04;
  write_file(paths[0], bad);
  auto second = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(second);
  EXPECT_FALSE(use.mapped);
  ASSERT_EQ(use.notes.size(), 1u);
  EXPECT_NE(use.notes[0].find("corrupt"), std::string::npos) << use.notes[0];
  EXPECT_TRUE(renders(*second, ids) == want);
  EXPECT_EQ(read_file(paths[0]), whole);
  load(corpus, paths, texts::packed, use);
  EXPECT_TRUE(use.mapped);
}

// Recomputes the checksums of `file` (an index file's bytes) after a change at byte `at`: the
// section holding it, the directory, the header; as a bug that wrote the damage would have.
void reseal(std::string& file, size_t at) {
  auto u64 = [&file](size_t off) {
    uint64_t v;
    std::memcpy(&v, file.data() + off, 8);
    return v;
  };
  auto sum = [&file](size_t off, size_t n) {
    index_checksum c;
    c.update(file.data() + off, n);
    return c.final();
  };
  // header: ..., dir_offset at 64, dir_count at 72, dir_checksum at 80, its own checksum at 88;
  // a directory entry: tag, reserved (4 bytes each), offset, bytes, checksum
  const uint64_t dir = u64(64), count = u64(72);
  bool found = false;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t e = dir + 32 * i;
    const uint64_t off = u64(e + 8), bytes = u64(e + 16);
    if (at >= off && at < off + bytes) {
      const uint64_t c = sum(off, bytes);
      std::memcpy(file.data() + e + 24, &c, 8);
      found = true;
    }
  }
  ASSERT_TRUE(found) << "no section holds byte " << at;
  const uint64_t d = sum(dir, 32 * count);
  std::memcpy(file.data() + 80, &d, 8);
  const uint64_t h = sum(0, 88);
  std::memcpy(file.data() + 88, &h, 8);
}

TEST(story_pack_test, a_text_that_does_not_decompress_fails_its_get_story_not_the_process) {
  // Verifies a compressed text that does not decompress in a mapped index whose checksums pass
  // (damage written before they were computed) makes get_story of that one story fail with
  // errc::unreadable (the tool error `unavailable` with its own message, REST 503) and nothing
  // written, logged once, while every other story and every search (which renders hits without
  // their texts) still answers; before, the process aborted on a check.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(1500);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  index_use use;
  ASSERT_TRUE(load(corpus, paths, texts::packed, use));
  std::string file = read_file(paths[0]);
  // a frame's magic number (28 B5 2F FD): the texts are the only frames in the file
  const size_t frame = file.find("\x28\xB5\x2F\xFD");
  ASSERT_NE(frame, std::string::npos);
  file[frame] ^= 0x01;  // no longer a zstd frame: decompression fails, whatever the bytes after
  reseal(file, frame);
  write_file(paths[0], file);
  auto b = load(corpus, paths, texts::packed, use);
  ASSERT_TRUE(b);
  ASSERT_TRUE(use.mapped) << "the checksums were recomputed: the damaged file is served";

  testing::internal::CaptureStderr();
  std::string broken;
  size_t good = 0;
  for (const std::string& id : ids) {
    out_buffer o;
    o.append("before");
    auto r = b->get_story(id, o, true);
    if (r) {
      ++good;
      continue;
    }
    EXPECT_EQ(r.error(), errc::unreadable) << id;
    EXPECT_EQ(o.view(), "before") << "a failed get_story wrote into the answer";
    EXPECT_TRUE(broken.empty()) << "a second unreadable story: " << id;
    broken = id;
  }
  ASSERT_FALSE(broken.empty()) << "no story's text failed to decompress";
  EXPECT_EQ(good, ids.size() - 1);
  out_buffer again;
  EXPECT_FALSE(b->get_story(broken, again, false).has_value());
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_NE(log.find("\"" + broken + "\""), std::string::npos) << log;
  EXPECT_NE(log.find("rebuild"), std::string::npos) << log;
  EXPECT_EQ(code(errc::unreadable), "unavailable");

  // searches render the broken story's summary like any other: they never read a text
  auto s = b->make_scratch();
  auto ref = b->find_story(broken);
  ASSERT_TRUE(ref.has_value());
  const auto& shard = static_cast<const local_shard&>(b->local_shard(ref->shard));
  EXPECT_FALSE(shard.text(ref->doc).has_value());
  out_buffer summary;
  {
    json_out j(summary, false);
    ASSERT_TRUE(shard.render_story(ref->doc, false, j).has_value());
  }
  const size_t at = summary.view().find("\"title\":\"") + 9;
  const std::string title(summary.view().substr(at, summary.view().find('"', at) - at));
  query_args a;
  a.query = title;
  a.limit = 50;
  out_buffer o;
  ASSERT_TRUE(b->search_stories(a, *s, o, true).has_value()) << title;
  EXPECT_NE(o.view().find(broken), std::string_view::npos) << title;
  EXPECT_EQ(o.view().find("\"text\""), std::string_view::npos);
  for (const char* q : {"the", "story", "kubernetes rust"}) {
    a.query = q;
    out_buffer page;
    EXPECT_TRUE(b->search_stories(a, *s, page, false).has_value()) << q;
  }
}

bool in_corpus(const backend& b) {
  for (size_t i = 0; i < b.local_count(); ++i) {
    if (!static_cast<const local_shard&>(b.local_shard(i)).texts_in_corpus()) {
      return false;
    }
  }
  return b.local_count() > 0;
}

// The edge corpus with lines the loader reads its own way: an integer id, a line ending in
// CRLF, blank lines, a story without a text.
std::string corpus_with_odd_lines(uint64_t count) {
  return corpus_text(count) +
         "\n{\"id\":4242,\"title\":\"An integer id\",\"time\":1700000000,\"text\":\"its text "
         "\\u00e9\\t\\\"escaped\\\"\"}\r\n  \n"
         "{\"id\":\"no-text\",\"title\":\"No text at all\",\"time\":1700000001}\n";
}

TEST(story_pack_test, texts_left_in_the_corpus_render_every_story_as_packed_ones) {
  // Verifies shards built from a corpus file that leave the texts there (each story's line
  // read back and parsed by get_story) render every story (escaped, non-ASCII, long, empty,
  // an integer id, a CRLF line, none at all) and every page byte for byte as packed shards,
  // fresh (served from the file it wrote), mapped by a later start, and built without an
  // index file; and that the index file is then smaller than the packed one.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_with_odd_lines(2000);
  write_file(corpus, jsonl);
  std::vector<std::string> ids = ids_of(jsonl);
  ids.push_back("4242");
  ASSERT_EQ(ids.size(), 2007u);
  index_use packed_use, fresh_use, mapped_use;
  auto packed = load(corpus, {dir.path + "/packed.idx"}, texts::packed, packed_use);
  ASSERT_TRUE(packed);
  EXPECT_FALSE(in_corpus(*packed));
  const std::vector<std::string> want = renders(*packed, ids);
  EXPECT_NE(want[ids.size() - 1].find("its text \u00e9\\t\\\"escaped\\\""), std::string::npos)
      << want[ids.size() - 1];

  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  auto fresh = load(corpus, paths, texts::in_corpus, fresh_use);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(fresh_use.remapped);
  EXPECT_TRUE(in_corpus(*fresh));
  EXPECT_EQ(packed_texts(*fresh), 0u);
  EXPECT_TRUE(renders(*fresh, ids) == want) << "texts read from the corpus render differently";
  auto mapped = load(corpus, paths, texts::in_corpus, mapped_use);
  ASSERT_TRUE(mapped);
  EXPECT_TRUE(mapped_use.mapped);
  EXPECT_TRUE(in_corpus(*mapped));
  EXPECT_TRUE(renders(*mapped, ids) == want) << "a mapped index renders differently";
  EXPECT_LT(fresh_use.parts.stories, packed_use.parts.stories * 3 / 4);

  load_options opts;
  opts.shards = 3;
  load_report rep;
  auto memory = load_jsonl_file(corpus, opts, rep);  // no index file
  ASSERT_TRUE(memory.has_value());
  EXPECT_TRUE(in_corpus(**memory));
  EXPECT_TRUE(renders(**memory, ids) == want) << "a build without an index renders differently";

  // an index file of such shards does not load without its corpus open
  auto r = index_reader::open(paths[0], *fingerprint_of(corpus), 3, 1);
  ASSERT_TRUE(r.has_value()) << r.error();
  local_shard alone;
  EXPECT_NE(alone.load(*r, 0).find("corpus file, which is not open"), std::string::npos);
}

TEST(story_pack_test, a_corpus_replaced_by_a_rename_is_read_as_it_was_indexed) {
  // Verifies a corpus replaced by renaming another file over it while the shards serve goes
  // on being read through the descriptor they hold: every story renders as before.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(800);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  index_use use;
  auto b = load(corpus, {dir.path + "/stories.idx"}, texts::in_corpus, use);
  ASSERT_TRUE(b);
  const std::vector<std::string> want = renders(*b, ids);
  write_file(dir.path + "/next.jsonl", corpus_text(5));
  ASSERT_EQ(std::rename((dir.path + "/next.jsonl").c_str(), corpus.c_str()), 0);
  EXPECT_TRUE(renders(*b, ids) == want);
}

TEST(story_pack_test, a_corpus_changed_in_place_fails_those_stories_never_answers_another) {
  // Verifies that once the corpus file is rewritten in place under shards that read their
  // texts from it, a story whose line now holds another id, or lies past the file's new end,
  // fails its get_story with errc::unreadable (nothing written, logged once) instead of
  // answering another story's text; every other story and every search still answer.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(1500);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  index_use use;
  auto b = load(corpus, {dir.path + "/stories.idx"}, texts::in_corpus, use);
  ASSERT_TRUE(b);
  ASSERT_TRUE(in_corpus(*b));
  const std::vector<std::string> want = renders(*b, ids);

  // One line's id changed in place (same length): another story's id now stands there.
  const std::string& victim = ids[700];
  const size_t line = jsonl.find("{\"id\":\"" + victim + "\"");
  ASSERT_NE(line, std::string::npos);
  const int fd = ::open(corpus.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char other = victim.back() == 'x' ? 'y' : 'x';
  ASSERT_EQ(::pwrite(fd, &other, 1, static_cast<off_t>(line + 7 + victim.size() - 1)), 1);
  testing::internal::CaptureStderr();
  auto get = [&](const std::string& id) {
    out_buffer o;
    o.append("before");
    auto r = b->get_story(id, o, false);
    if (!r) {
      EXPECT_EQ(r.error(), errc::unreadable) << id;
      EXPECT_EQ(o.view(), "before") << "a failed get_story wrote into the answer";
    }
    return r.has_value();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(get(ids[i]), i != 700) << ids[i];
  }
  // Cut to the half: the stories past the end fail too, the others answer as before.
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(jsonl.size() / 2)), 0);
  ::close(fd);
  size_t failed = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t at = jsonl.find("{\"id\":\"" + ids[i] + "\"");
    const bool whole = jsonl.find('\n', at) < jsonl.size() / 2;
    EXPECT_EQ(get(ids[i]), whole && i != 700) << ids[i];
    failed += whole ? 0 : 1;
  }
  EXPECT_GT(failed, 100u);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_NE(log.find("\"" + victim + "\""), std::string::npos) << log;
  EXPECT_NE(log.find("changed in place"), std::string::npos) << log;
  // searches render summaries from the index alone
  const std::vector<std::string> now = renders(*b, {});
  EXPECT_TRUE(std::equal(now.begin(), now.end(), want.end() - static_cast<long>(now.size())));
}

TEST(story_pack_test, heads_at_their_edges_render_the_same_fresh_and_mapped) {
  // Verifies each story's head (story_head.h) keeps its fields at their edges: 64-bit scores
  // and comment counts at both ends, an id of 200 bytes, a title of 20,000, empty fields, many
  // tags; a later duplicate's tags stay off the first story's (seal() reorders the tags with
  // the stories). Fresh and mapped render each byte for byte, and a tag filter finds the same.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  std::string jsonl = corpus_text(400);
  const std::string long_id(200, 'q'), long_title(20000, 'T');
  std::string many_tags;
  for (int t = 0; t < 40; ++t) {
    many_tags += (t ? ",\"" : "\"") + std::string("tag") + std::to_string(t) + "\"";
  }
  jsonl += "{\"id\":\"" + long_id + "\",\"title\":\"" + long_title +
           "\",\"url\":\"\",\"by\":\"\",\"time\":1,\"score\":-9223372036854775808,"
           "\"comments\":9223372036854775807,\"tags\":[" +
           many_tags + "],\"text\":\"edge\"}\n";
  jsonl +=
      "{\"id\":\"edge-max\",\"title\":\"Max\",\"url\":\"u\",\"by\":\"b\",\"time\":2,"
      "\"score\":9223372036854775807,\"comments\":-9223372036854775808,\"tags\":[\"lone\"],"
      "\"text\":\"edge max\"}\n";
  // the same id again with other tags: skipped as a duplicate, its tags never the first's
  jsonl +=
      "{\"id\":\"edge-max\",\"title\":\"Again\",\"url\":\"u\",\"by\":\"b\",\"time\":3,"
      "\"score\":1,\"comments\":1,\"tags\":[\"tag7\",\"dup\"],\"text\":\"edge again\"}\n";
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = {long_id, "edge-max", "edge-long", "edge-empty"};
  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  index_use use;
  auto fresh = load(corpus, paths, texts::in_corpus, use);
  auto mapped = load(corpus, paths, texts::in_corpus, use);
  ASSERT_TRUE(fresh && mapped);
  ASSERT_TRUE(use.mapped);
  for (const backend* b : {fresh.get(), mapped.get()}) {
    out_buffer o;
    ASSERT_TRUE(b->get_story(long_id, o, false).has_value());
    const std::string got(o.view());
    EXPECT_NE(got.find("\"score\":-9223372036854775808,\"comments\":9223372036854775807"),
              std::string::npos)
        << got.substr(0, 400);
    EXPECT_NE(got.find(long_title), std::string::npos);
    EXPECT_NE(got.find("\"tag0\",\"tag1\","), std::string::npos);
    EXPECT_NE(got.find("\"tag39\"]"), std::string::npos);
    out_buffer m;
    ASSERT_TRUE(b->get_story("edge-max", m, false).has_value());
    const std::string max(m.view());
    EXPECT_NE(max.find("\"score\":9223372036854775807,\"comments\":-9223372036854775808"),
              std::string::npos)
        << max;
    EXPECT_NE(max.find("\"tags\":[\"lone\"]"), std::string::npos) << max;
    EXPECT_EQ(max.find("Again"), std::string::npos) << max;
    // a tag filter: the duplicate's "dup" tag belongs to no story; tag7 to the long one only
    auto s = b->make_scratch();
    for (const char* tag : {"tag7", "dup", "lone"}) {
      query_args a;
      a.query = "edge";
      a.tags[0] = tag;
      a.tag_count = 1;
      out_buffer page;
      ASSERT_TRUE(b->search_stories(a, *s, page, false).has_value());
      const std::string p(page.view());
      EXPECT_EQ(p.find(long_id) != std::string::npos, std::string_view(tag) == "tag7") << tag;
      EXPECT_EQ(p.find("edge-max") != std::string::npos, std::string_view(tag) == "lone") << tag;
    }
  }
  EXPECT_TRUE(renders(*fresh, ids) == renders(*mapped, ids));
}

TEST(story_pack_test, a_read_that_must_not_wait_asks_for_the_bytes_it_lacks_then_answers_the_same) {
  // Verifies get_story's text read on a core (a pending_read given): with the files' pages
  // dropped from the page cache it waits for nothing: it fails with errc::would_block, writes
  // nothing and names bytes of the file it read from; once those bytes are read (as the core's
  // ring does, here with pread) it is asked again and gets further, and in a few rounds answers
  // byte for byte what a read that waits answers. For texts packed in the index, stored raw
  // there, and left in the corpus file.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  const std::string jsonl = corpus_text(1500);
  write_file(corpus, jsonl);
  const std::vector<std::string> ids = ids_of(jsonl);
  for (const texts how : {texts::packed, texts::raw, texts::in_corpus}) {
    SCOPED_TRACE(static_cast<int>(how));
    const std::vector<std::string> paths = {dir.path + "/stories-" +
                                            std::to_string(static_cast<int>(how)) + ".idx"};
    index_use use;
    auto b = load(corpus, paths, how, use);
    ASSERT_TRUE(b);
    size_t blocked = 0;
    for (size_t i = 0; i < ids.size(); i += 97) {
      out_buffer want;
      ASSERT_TRUE(b->get_story(ids[i], want, true).has_value()) << ids[i];
      // (The index file's first pages stay: the backend maps them. The corpus is not mapped.)
      (void)tollgate::test::evict_from_page_cache(paths[0]);
      if (!tollgate::test::evict_from_page_cache(corpus)) {
        GTEST_SKIP() << "this file system keeps the files' pages cached: nothing to wait for";
      }
      out_buffer got;
      got.append("before");
      int rounds = 0;
      for (;;) {
        pending_read r;
        auto a = b->get_story(ids[i], got, true, nullptr, &r);
        if (a) {
          break;
        }
        ASSERT_EQ(a.error(), errc::would_block) << ids[i];
        ASSERT_EQ(got.view(), "before") << "a read that stopped wrote into the answer";
        ASSERT_GE(r.fd, 0);
        ASSERT_GT(r.len, 0u);
        struct stat st {};
        ASSERT_EQ(::fstat(r.fd, &st), 0);
        ASSERT_LE(r.at + r.len, static_cast<uint64_t>(st.st_size));
        std::string sink(r.len, '\0');
        ASSERT_TRUE(read_fully(r.fd, r.at, r.len, sink.data()));
        ASSERT_LT(++rounds, 8) << "no progress reading " << ids[i];
      }
      blocked += rounds > 0 ? 1 : 0;
      EXPECT_EQ(got.view().substr(6), want.view()) << ids[i];
    }
    EXPECT_GT(blocked, 0u) << "no story's text was missing from the page cache";
  }
}

TEST(story_pack_test, the_start_up_probe_finds_the_files_that_refuse_reads_that_must_not_wait) {
  // Verifies probe_nowait_reads: a /proc file (no file system of that kind takes RWF_NOWAIT)
  // is found refusing, and a regular file on the disk the tests run from taking them.
  const int proc = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(proc, 0);
  EXPECT_FALSE(probe_nowait_reads(proc, "/proc/self/status"));
  ::close(proc);
  temp_dir dir;
  const std::string file = dir.path + "/f";
  write_file(file, "some bytes");
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char byte;
  iovec v{&byte, 1};
  const bool takes = ::preadv2(fd, &v, 1, 0, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP;
  EXPECT_EQ(probe_nowait_reads(fd, file), takes);
  ::close(fd);
}

TEST(story_pack_test,
     a_corpus_on_a_file_system_that_refuses_reads_that_must_not_wait_is_read_at_once) {
  // Verifies a corpus and index on a file system that refuses RWF_NOWAIT (tmpfs here: its
  // pages are memory, a read never waits for a disk) answer get_story from a core at once,
  // without asking for bytes; and that this refusal is the file's, not the process': files on
  // the disk afterwards still ask for the bytes they lack rather than wait.
  const temp_dir shm("/dev/shm");
  if (shm.path.empty()) {
    GTEST_SKIP() << "no /dev/shm here";
  }
  const std::string jsonl = corpus_text(600);
  const std::vector<std::string> ids = ids_of(jsonl);
  const std::string mem_corpus = shm.path + "/stories.jsonl";
  write_file(mem_corpus, jsonl);
  {
    const int fd = ::open(mem_corpus.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const bool takes = probe_nowait_reads(fd, mem_corpus);
    ::close(fd);
    if (takes) {
      GTEST_SKIP() << "tmpfs takes RWF_NOWAIT on this kernel: nothing refuses";
    }
  }
  for (const texts how : {texts::packed, texts::in_corpus}) {
    SCOPED_TRACE(static_cast<int>(how));
    index_use use;
    auto b = load(mem_corpus, {shm.path + "/i" + std::to_string(static_cast<int>(how))}, how, use);
    ASSERT_TRUE(b);
    for (size_t i = 0; i < ids.size(); i += 53) {
      out_buffer want, got;
      ASSERT_TRUE(b->get_story(ids[i], want, true).has_value()) << ids[i];
      pending_read r;
      ASSERT_TRUE(b->get_story(ids[i], got, true, nullptr, &r).has_value()) << ids[i];
      EXPECT_LT(r.fd, 0) << "asked for bytes a read in memory has";
      EXPECT_EQ(got.view(), want.view()) << ids[i];
    }
  }
  // The same corpus on the disk: its texts not cached, a read that must not wait stops.
  temp_dir dir;
  const std::string corpus = dir.path + "/stories.jsonl";
  write_file(corpus, jsonl);
  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  index_use use;
  auto b = load(corpus, paths, texts::in_corpus, use);
  ASSERT_TRUE(b);
  size_t stopped = 0;
  for (size_t i = 0; i < ids.size(); i += 53) {
    (void)tollgate::test::evict_from_page_cache(paths[0]);  // (its mapped pages stay)
    if (!tollgate::test::evict_from_page_cache(corpus)) {
      GTEST_SKIP() << "this file system keeps the files' pages cached: nothing to wait for";
    }
    out_buffer got;
    pending_read r;
    if (!b->get_story(ids[i], got, true, nullptr, &r)) {
      ++stopped;
    }
  }
  EXPECT_GT(stopped, 0u) << "a refusal on tmpfs turned off reads that must not wait on the disk";
}

}  // namespace
}  // namespace tollgate::search
