// local_shard's stored texts: packed at seal(), read back by text().
//
// A sealed shard keeps each story's short fields (id, title, url, by) raw and back to back, in
// doc order: every search hit renders them, and the id orders hits across shards. The texts,
// most of a story's bytes and read only by get_story (and the reference evaluator), are
// compressed, each alone so that reading one decompresses only its own:
//   1. a zstd dictionary is trained (ZDICT) on a sample of the shard's texts, spread evenly
//      over its docs; too few sample bytes: no dictionary;
//   2. each text becomes one zstd frame (level kLevel, no checksum, no content size: the raw
//      length is in the doc record, and the index file's section checksums cover the bytes);
//      one that does not come out smaller is stored raw and flagged kTextRaw;
//   3. text() decompresses into a per-thread scratch buffer with a per-thread context and the
//      shard's digested dictionary (ZSTD_DDict, read-only, shared by all threads). A shard
//      loaded from an index file reads the frame with pread (index_file_reader), not through
//      the mapping: a fault there would make the 64 KB around one text resident.
// A shard built from a corpus file (texts_in(), every `serve --corpus` and `index build`) skips
// 1-2: it keeps each story's line place, and text() reads the line back from the corpus file and
// parses it (text_from_corpus), checking it still holds the story (docs/design.md §8).
// Measured on the 1M-story corpus (perf/notes/search-2026-12-04.md, "Stored texts compressed"):
// level 1 with a 32 KiB dictionary keeps about half of a text's bytes at a few µs per text to
// compress and about one to decompress; higher levels cost build time for a few percent, groups
// of consecutive texts in one frame would save another few percent but decompress several texts
// per read.
#include <fmt/format.h>
#include <simdjson.h>
#include <zdict.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "search/corpus_text.h"
#include "search/index_file.h"
#include "search/shard_impl.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/log.h"

namespace tollgate::search {

using namespace detail;

namespace {

constexpr int kLevel = 1;
// The match finder's hash table: 2^16 entries rather than level 1's 2^14 for a text of a few
// hundred bytes beside a 32 KiB dictionary (fewer of the dictionary's positions overwritten):
// about 5% fewer bytes at the same speed (1M-story corpus); the frames decode the same way.
constexpr int kHashLog = 16;
constexpr size_t kDictBytes = size_t{32} << 10;
constexpr size_t kDictSamples = 1000;                     // texts sampled for the dictionary
constexpr size_t kDictMinSampleBytes = size_t{64} << 10;  // below: no dictionary
constexpr size_t kMinPackedLen = 32;                      // shorter texts are stored raw

// The calling thread's decompression context and output buffer, reused by every text() call.
struct text_scratch {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::vector<char> buf;
  std::vector<char> in;          // a text read from an index file, or a line from the corpus file
  simdjson::dom::parser parser;  // a corpus line's (its buffers grow to the longest line read)
  ~text_scratch() { ZSTD_freeDCtx(dctx); }
};

text_scratch& thread_scratch() {
  thread_local text_scratch s;
  return s;
}

struct cctx_deleter {
  void operator()(ZSTD_CCtx* c) const noexcept { ZSTD_freeCCtx(c); }
};

}  // namespace

void local_shard::ddict_deleter::operator()(ZSTD_DDict_s* d) const noexcept { ZSTD_freeDDict(d); }

void local_shard::pack_stories() {
  const size_t n = docs_.size();
  // Texts left in the corpus file: only where each line is (seal() kept line_store_ in doc
  // order); the texts themselves go with the arena.
  const bool pack = pack_texts && !corpus_;
  const bool keep = !corpus_;
  // 1. The dictionary, from up to kDictSamples non-empty texts spread over the shard.
  text_dict_store_.clear();
  if (pack) {
    std::vector<char> samples;
    std::vector<size_t> sizes;
    const size_t step = std::max<size_t>(1, n / kDictSamples);
    for (size_t d = 0; d < n; d += step) {
      const std::string_view t = unpacked_text(docs_[d]);
      if (!t.empty()) {
        samples.insert(samples.end(), t.begin(), t.end());
        sizes.push_back(t.size());
      }
    }
    if (samples.size() >= kDictMinSampleBytes) {
      text_dict_store_.resize(kDictBytes);
      const size_t got =
          ZDICT_trainFromBuffer(text_dict_store_.data(), text_dict_store_.size(), samples.data(),
                                sizes.data(), static_cast<unsigned>(sizes.size()));
      text_dict_store_.resize(ZDICT_isError(got) ? 0 : got);
    }
  }
  // 2. The short fields into one block, each text into a frame (or raw) in another.
  size_t head_bytes = 0, bound = 0;
  for (const doc_rec& r : docs_) {
    head_bytes += read_head(r.base).size;
    bound += !keep ? 0 : pack ? ZSTD_compressBound(r.text_len) : r.text_len;
  }
  std::unique_ptr<char, free_deleter> heads(static_cast<char*>(alloc_build(head_bytes)));
  std::unique_ptr<uint8_t, free_deleter> packed(keep ? static_cast<uint8_t*>(alloc_build(bound))
                                                     : nullptr);
  std::unique_ptr<ZSTD_CCtx, cctx_deleter> cctx(pack ? ZSTD_createCCtx() : nullptr);
  if (cctx) {
    TOLLGATE_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, 0)));
    TOLLGATE_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_dictIDFlag, 0)));
    TOLLGATE_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 0)));
    TOLLGATE_CHECK(
        !ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, kLevel)));
    TOLLGATE_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_hashLog, kHashLog)));
    if (!text_dict_store_.empty()) {
      // Digested once, at the first frame, with the parameters above (kept for every frame).
      TOLLGATE_CHECK(!ZSTD_isError(
          ZSTD_CCtx_loadDictionary(cctx.get(), text_dict_store_.data(), text_dict_store_.size())));
    }
  }
  text_at_store_.assign(keep ? n + 1 : 0, 0);
  char* h = heads.get();
  uint64_t at = 0;
  for (size_t d = 0; d < n; ++d) {
    doc_rec& r = docs_[d];
    const story_head head = read_head(r.base);
    const std::string_view t{r.base + head.size, r.text_len};
    std::memcpy(h, r.base, head.size);
    r.base = h;
    char& escape = h[head.escape_at];  // the copy's: kTextRaw is set below
    h += head.size;
    if (!keep) {
      escape = static_cast<char>(head.escape & ~kTextRaw);
      continue;
    }
    text_at_store_[d] = at;
    size_t len = 0;
    if (cctx && t.size() >= kMinPackedLen) {
      len = ZSTD_compress2(cctx.get(), packed.get() + at, bound - at, t.data(), t.size());
      TOLLGATE_CHECK(!ZSTD_isError(len));  // the bound leaves room for every frame
    }
    if (len == 0 || len >= t.size()) {
      std::memcpy(packed.get() + at, t.data(), t.size());
      len = t.size();
      escape = static_cast<char>(head.escape | kTextRaw);
    } else {
      escape = static_cast<char>(head.escape & ~kTextRaw);
    }
    at += len;
  }
  if (keep) {
    text_at_store_[n] = at;
  }
  lines_ = line_store_;
  // 3. The texts stay where they were compressed: the block's tail past them was never
  // written, so it was never faulted in (no copy to an exact size). The arena (the raw
  // stories) is released.
  texts_ = std::move(packed);
  texts_bytes_ = at;
  text_at_ = text_at_store_;
  text_dict_ = text_dict_store_;
  TOLLGATE_CHECK(digest_text_dict());
  for (auto& c : chunks_) {
    if (c.get_deleter().owned) {
      recycle_build(c.release());  // the next shard's streams take its pages
    }
  }
  chunks_.clear();
  chunks_.push_back(std::move(heads));
  chunk_ptr_ = nullptr;
  chunk_left_ = 0;
  arena_bytes_ = head_bytes;
}

bool local_shard::digest_text_dict() {
  ddict_.reset(text_dict_.empty() ? nullptr
                                  : ZSTD_createDDict(text_dict_.data(), text_dict_.size()));
  return text_dict_.empty() || ddict_ != nullptr;
}

result<std::string_view, errc> local_shard::text_from_corpus(uint32_t doc,
                                                             pending_read* nowait) const {
  const doc_rec& r = docs_[doc];
  text_scratch& s = thread_scratch();
  corpus_line e{};
  const char* why = nullptr;
  errno = 0;
  // The line's place through the index file when loaded (like a frame's, see below): checked
  // against the corpus as it was opened, then the line itself, read whole.
  if (texts_file_
          ? !texts_file_->read(reinterpret_cast<const uint8_t*>(&lines_[doc]), sizeof e, &e, nowait)
          : (e = lines_[doc], false)) {
    if (nowait != nullptr && nowait->fd >= 0) {
      return unexpected(errc::would_block);
    }
    why = "its line's place cannot be read from the index file";
  } else if (e.at > corpus_->size() || e.len > corpus_->size() - e.at) {
    why = "its line's place is past the end of the corpus file";
  } else {
    if (s.in.size() < e.len + simdjson::SIMDJSON_PADDING) {
      s.in.resize(std::max<size_t>(e.len + simdjson::SIMDJSON_PADDING, 2 * s.in.size()));
    }
    if (!corpus_->read(e.at, e.len, s.in.data(), nowait)) {
      if (nowait != nullptr && nowait->fd >= 0) {
        return unexpected(errc::would_block);
      }
      why = "its line cannot be read from the corpus file";
    }
  }
  const int read_errno = why != nullptr ? errno : 0;
  // The line must still be this story's: the same id (a string, or the integer the loader
  // wrote out), a text of the same length. Anything else: the corpus was changed in place.
  std::string_view text;
  if (why == nullptr) {
    const std::string_view want = id(doc);
    bool same_id = false, have_text = false;
    simdjson::dom::object obj;
    if (!s.parser.parse(s.in.data(), e.len, false).get_object().get(obj)) {
      for (simdjson::dom::key_value_pair kv : obj) {
        if (kv.key == "id") {
          std::string_view got;
          uint64_t num = 0;
          char buf[24];
          if (kv.value.is_string()) {
            same_id = !kv.value.get_string().get(got) && got == want;
          } else if (!kv.value.get_uint64().get(num)) {
            auto end = fmt::format_to(buf, "{}", num);
            same_id = std::string_view(buf, static_cast<size_t>(end - buf)) == want;
          } else {
            same_id = false;
          }
        } else if (kv.key == "text") {
          have_text = !kv.value.get_string().get(text);
        }
      }
    }
    if (!have_text) {
      text = {};
    }
    if (!same_id || text.size() != r.text_len) {
      why =
          "the corpus file's line there is no longer this story's (it was changed in place "
          "since it was indexed: replace a corpus by renaming a new file over it)";
    }
  }
  if (why != nullptr) {
    const int err = read_errno;
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true, std::memory_order_relaxed)) {  // only once; orders nothing
      log_error(
          "story \"{}\": {} ({}{}); get_story answers unavailable for it. Further unreadable "
          "stories are not logged.",
          id(doc), why, corpus_->path(), err != 0 ? fmt::format(": {}", std::strerror(err)) : "");
    }
    return unexpected(errc::unreadable);
  }
  return text;
}

result<std::string_view, errc> local_shard::text(uint32_t doc, pending_read* nowait) const {
  if (nowait != nullptr) {
    *nowait = pending_read{};
  }
  if (corpus_) {
    return text_from_corpus(doc, nowait);
  }
  const doc_rec& r = docs_[doc];
  text_scratch& s = thread_scratch();
  uint64_t at[2] = {0, 0};
  const char* src = nullptr;
  if (texts_file_) {
    errno = 0;
    // The entry pair and the frame both through the file: get_story's reads map nothing. The
    // checks at load held for the mapping; these bytes are read again, so they are bounded
    // again (a frame is at most its text's compress bound; a raw text is its length).
    const bool got =
        texts_file_->read(reinterpret_cast<const uint8_t*>(&text_at_[doc]), sizeof at, at,
                          nowait) &&
        at[0] <= at[1] && at[1] <= texts_bytes_ &&
        at[1] - at[0] <= std::max<uint64_t>(ZSTD_compressBound(r.text_len), r.text_len) && [&] {
          const size_t len = at[1] - at[0];
          if (s.in.size() < len) {
            s.in.resize(std::max(len, 2 * s.in.size()));
          }
          return texts_file_->read(texts_.get() + at[0], len, s.in.data(), nowait);
        }();
    if (!got && nowait != nullptr && nowait->fd >= 0) {
      return unexpected(errc::would_block);  // nothing wrong: not in the page cache yet
    }
    if (!got) {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true, std::memory_order_relaxed)) {  // only once; orders nothing
        log_error(
            "story \"{}\": its stored text cannot be read from the index file ({}); get_story "
            "answers unavailable for it. Further unreadable stories are not logged.",
            id(doc), errno != 0 ? std::strerror(errno) : "the file changed since it was mapped");
      }
      return unexpected(errc::unreadable);
    }
    src = s.in.data();
  } else {
    at[0] = text_at_[doc];
    at[1] = text_at_[doc + 1];
    src = reinterpret_cast<const char*>(texts_.get()) + at[0];
  }
  const size_t len = at[1] - at[0];
  if ((read_head(r.base).escape & kTextRaw) != 0) {
    return std::string_view{src, len};
  }
  if (s.buf.size() < r.text_len) {
    s.buf.resize(std::max<size_t>(r.text_len, 2 * s.buf.size()));
  }
  const size_t got =
      ddict_ ? ZSTD_decompress_usingDDict(s.dctx, s.buf.data(), r.text_len, src, len, ddict_.get())
             : ZSTD_decompressDCtx(s.dctx, s.buf.data(), r.text_len, src, len);
  // The bytes were written by pack_stories() and, in a mapped file, verified by its checksums;
  // a frame that still does not decompress to its recorded length (a bug, or damage the
  // checksums missed) fails this one story's reads, never the process.
  if (ZSTD_isError(got) || got != r.text_len) {
    // Logged once per process: a client asking for a damaged story in a loop must not flood
    // the log; /metrics counts every answer (outcome unavailable).
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true, std::memory_order_relaxed)) {  // only once; orders nothing
      log_error(
          "story \"{}\": its stored text does not decompress ({}); get_story answers "
          "unavailable for it. The index is damaged: rebuild it (tollgate index build). Further "
          "unreadable stories are not logged.",
          id(doc), ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong length");
    }
    return unexpected(errc::unreadable);
  }
  return std::string_view{s.buf.data(), r.text_len};
}

size_t local_shard::packed_texts() const noexcept {
  if (corpus_) {
    return 0;  // none held: they are read from the corpus file
  }
  size_t k = 0;
  for (const doc_rec& r : docs_) {
    k += (read_head(r.base).escape & kTextRaw) == 0 ? 1 : 0;
  }
  return k;
}

}  // namespace tollgate::search
