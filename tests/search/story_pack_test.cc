// Stored texts (src/search/story_pack.cc): a shard whose texts are compressed renders every
// story, summary and full, byte for byte as one whose texts are stored raw, fresh and mapped
// from an index file; a flipped bit in a compressed text is caught by the section checksums; a
// text that still does not decompress fails its own get_story with an error, never the process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "search/index_file.h"
#include "search/local_shard.h"
#include "search/test_corpus.h"
#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/index_file.h"

namespace tollgate::search {
namespace {

using namespace test_support;
namespace fs = std::filesystem;

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/tollgate-story-pack-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
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

// A backend loaded from `corpus` through load_indexed with `pack` as pack_texts.
std::unique_ptr<backend> load(const std::string& corpus, const std::vector<std::string>& paths,
                              bool pack, index_use& use) {
  const bool saved = pack_texts;
  pack_texts = pack;
  load_options opts;
  opts.shards = 3;
  load_report rep;
  auto b = load_indexed(corpus, paths, opts, rep, use);
  pack_texts = saved;
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
  auto raw = load(corpus, {}, false, use);
  ASSERT_TRUE(raw);
  EXPECT_EQ(packed_texts(*raw), 0u);
  const std::vector<std::string> want = renders(*raw, ids);
  EXPECT_NE(want[ids.size() - 2].find("paragraph 7919 of the long story"), std::string::npos);

  const std::vector<std::string> paths = {dir.path + "/stories.idx"};
  auto fresh = load(corpus, paths, true, use);
  ASSERT_TRUE(fresh);
  EXPECT_FALSE(use.mapped);
  EXPECT_EQ(use.path, paths[0]);
  // the generated texts and the long one compress; the empty, short and noisy ones do not
  EXPECT_GT(packed_texts(*fresh), 2900u);
  EXPECT_LE(packed_texts(*fresh), 3003u);  // never the empty or the short one
  EXPECT_TRUE(renders(*fresh, ids) == want) << "a fresh packed build renders differently";

  auto mapped = load(corpus, paths, true, use);
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
  auto fresh = load(corpus, paths, true, use);
  auto mapped = load(corpus, paths, true, use);
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
  load(corpus, {dir.path + "/raw.idx"}, false, raw);
  load(corpus, {dir.path + "/packed.idx"}, true, written);
  load(corpus, {dir.path + "/packed.idx"}, true, mapped);
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
  auto first = load(corpus, paths, true, use);
  ASSERT_TRUE(first);
  const std::vector<std::string> want = renders(*first, ids);
  const std::string whole = read_file(paths[0]);
  // a frame's magic number (28 B5 2F FD): the texts are the only frames in the file
  const size_t frame = whole.find("\x28\xB5\x2F\xFD");
  ASSERT_NE(frame, std::string::npos);
  std::string bad = whole;
  bad[frame + 12] ^= 0x04;
  write_file(paths[0], bad);
  auto second = load(corpus, paths, true, use);
  ASSERT_TRUE(second);
  EXPECT_FALSE(use.mapped);
  ASSERT_EQ(use.notes.size(), 1u);
  EXPECT_NE(use.notes[0].find("corrupt"), std::string::npos) << use.notes[0];
  EXPECT_TRUE(renders(*second, ids) == want);
  EXPECT_EQ(read_file(paths[0]), whole);
  load(corpus, paths, true, use);
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
  ASSERT_TRUE(load(corpus, paths, true, use));
  std::string file = read_file(paths[0]);
  // a frame's magic number (28 B5 2F FD): the texts are the only frames in the file
  const size_t frame = file.find("\x28\xB5\x2F\xFD");
  ASSERT_NE(frame, std::string::npos);
  file[frame] ^= 0x01;  // no longer a zstd frame: decompression fails, whatever the bytes after
  reseal(file, frame);
  write_file(paths[0], file);
  auto b = load(corpus, paths, true, use);
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

}  // namespace
}  // namespace tollgate::search
