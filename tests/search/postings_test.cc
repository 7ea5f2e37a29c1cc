// A posting as the doc stream holds it (src/search/postings.h), written by the build's own
// writers (detail::put_varint, detail::put_tf) and read back by detail::read_posting, whose
// one-load forms (three one-byte fields; a two-byte doc gap before two one-byte fields) must
// give what the byte-by-byte reading gives, at every edge of a field's width; and the block a
// batch of seeks would reach, found without seeking (posting_cursor::blocks_of).
#include "search/postings.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "search/shard_impl.h"

namespace tollgate::search::detail {
namespace {

struct posting {
  uint32_t delta, tf_title, tf_text, pos_len;
};

TEST(postings_test, every_form_of_a_posting_reads_back_field_for_field) {
  // Gaps at each varint width's edges (1, 2, 3 bytes and more), frequencies in the one-byte
  // form and past it (the escape), position lengths of one byte and of two.
  const uint32_t gaps[] = {1, 127, 128, 129, 255, 256, 16383, 16384, 2097151, 2097152, UINT32_MAX};
  const uint32_t tfs[][2] = {{0, 1}, {3, 31}, {4, 0}, {0, 32}, {1, 2}};
  const uint32_t lens[] = {0, 1, 127, 128, 300};
  std::vector<posting> want;
  std::vector<uint8_t> stream;
  for (uint32_t g : gaps) {
    for (const auto& tf : tfs) {
      for (uint32_t len : lens) {
        want.push_back({g, tf[0], tf[1], len});
        uint8_t buf[32];
        size_t n = put_varint(buf, g);
        n += put_tf(buf + n, tf[0], tf[1]);
        n += put_varint(buf + n, len);
        stream.insert(stream.end(), buf, buf + n);
      }
    }
  }
  const size_t end = stream.size();
  stream.resize(end + 4, 0);  // the doc stream's padding: a 4-byte load at its last posting
  const uint8_t* p = stream.data();
  const uint8_t* q = stream.data();  // the same stream, read byte by byte
  for (const posting& w : want) {
    posting got{};
    read_posting(p, got.delta, got.tf_title, got.tf_text, got.pos_len);
    posting ref{};
    ref.delta = read_varint(q);
    read_tf(q, ref.tf_title, ref.tf_text);
    ref.pos_len = read_varint(q);
    SCOPED_TRACE(::testing::Message() << "gap " << w.delta << " tf " << w.tf_title << "/"
                                      << w.tf_text << " positions " << w.pos_len);
    EXPECT_EQ(got.delta, w.delta);
    EXPECT_EQ(got.tf_title, w.tf_title);
    EXPECT_EQ(got.tf_text, w.tf_text);
    EXPECT_EQ(got.pos_len, w.pos_len);
    EXPECT_EQ(ref.delta, w.delta);
    ASSERT_EQ(p, q) << "both readers end each posting at the same byte";
  }
  EXPECT_EQ(p, stream.data() + end);
}

TEST(postings_test, blocks_of_finds_the_block_a_seek_would_reach_from_every_block) {
  // Verifies posting_cursor::blocks_of (the batched phrase walk's block lookups) against a
  // scan of the skips: for lists of 1 to 40 blocks, the cursor on each block, and ascending
  // targets from before its first doc to past its last (nblocks then), as a whole batch and one
  // target at a time, including the shortcut's edges (the current block, the next, the last).
  for (uint32_t nblocks = 1; nblocks <= 40; ++nblocks) {
    std::vector<skip_entry> skips(nblocks);
    for (uint32_t j = 0; j < nblocks; ++j) {
      skips[j].last_doc = 10 * (j + 1) + (j % 3);  // uneven gaps
    }
    posting_cursor c{};
    c.skips = skips.data();
    c.nblocks = nblocks;
    std::vector<uint32_t> targets;
    for (uint32_t t = 0; t <= skips.back().last_doc + 15; ++t) {
      targets.push_back(t);
    }
    std::vector<uint32_t> got(targets.size()), one(1);
    for (uint32_t b = 0; b < nblocks; ++b) {
      c.block = b;
      c.blocks_of(targets.data(), static_cast<uint32_t>(targets.size()), got.data());
      for (size_t i = 0; i < targets.size(); ++i) {
        uint32_t want = b;
        while (want < nblocks && skips[want].last_doc < targets[i]) {
          ++want;
        }
        c.blocks_of(&targets[i], 1, one.data());
        ASSERT_EQ(got[i], want) << nblocks << " blocks, cursor on " << b << ", target "
                                << targets[i];
        ASSERT_EQ(one[0], want) << nblocks << " blocks, cursor on " << b << ", target "
                                << targets[i] << " alone";
      }
    }
  }
}

}  // namespace
}  // namespace tollgate::search::detail
