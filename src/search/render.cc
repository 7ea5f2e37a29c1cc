// local_shard::render_story (a stored story as JSON) and memory_bytes.
#include <zstd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "search/shard_impl.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search {

using namespace detail;

namespace {

// The structural text of a rendered story, quotes of the string values included, with its nested
// form made at compile time.
constexpr json_literal kLitId{"{\"id\":\""};
constexpr json_literal kLitTitle{"\",\"title\":\""};
constexpr json_literal kLitUrl{"\",\"url\":\""};
constexpr json_literal kLitBy{"\",\"by\":\""};
constexpr json_literal kLitTime{"\",\"time\":"};
constexpr json_literal kLitScore{",\"score\":"};
constexpr json_literal kLitComments{",\"comments\":"};
constexpr json_literal kLitTags{",\"tags\":["};
constexpr json_literal kLitTagFirst{"\""};
constexpr json_literal kLitTagNext{"\",\""};
constexpr json_literal kLitTagsEnd{"\"]"};
constexpr json_literal kLitNoTagsEnd{"]"};
constexpr json_literal kLitText{",\"text\":\""};
constexpr json_literal kLitTextEnd{"\"}"};
constexpr json_literal kLitEnd{"}"};

constexpr size_t kStoryFixedBound =
    json_out::literal_bound(kLitId) + json_out::literal_bound(kLitTitle) +
    json_out::literal_bound(kLitUrl) + json_out::literal_bound(kLitBy) +
    json_out::literal_bound(kLitTime) + json_out::literal_bound(kLitScore) +
    json_out::literal_bound(kLitComments) + json_out::literal_bound(kLitTags) +
    json_out::literal_bound(kLitTagsEnd) + json_out::literal_bound(kLitEnd) +
    3 * json_out::number_bound;

// A field's bytes: copied when the load found nothing to escape in it, else escaped.
inline char* put_field(const json_out& out, char* dst, std::string_view s, bool escape) {
  return escape ? out.put_escaped(dst, s) : json_out::put_plain(dst, s);
}

}  // namespace

result<void, errc> local_shard::render_story(uint32_t doc, bool with_text, json_out& out,
                                             pending_read* nowait) const {
  // One reservation for the whole summary (fields the load flagged as needing escapes count at
  // their worst case), then every piece is written straight into it; structural text is copied
  // pre-escaped. The text, only in a single story's render, is appended after: it is read
  // first (decompressed into this thread's scratch), so that a text that cannot be read fails
  // the render before anything is written.
  std::string_view body;
  if (with_text) {
    auto t = text(doc, nowait);
    if (!t) {
      return unexpected(t.error());
    }
    body = *t;
  }
  const field_views f(docs_[doc]);
  const std::span<const uint32_t> tags = tags_of(doc);
  auto bound_of = [&out](std::string_view s, bool escape) {
    return escape ? out.escaped_bound(s.size()) : s.size();
  };
  size_t bound = kStoryFixedBound + bound_of(f.id, (f.escape & kEscapeId) != 0) +
                 bound_of(f.title, (f.escape & kEscapeTitle) != 0) +
                 bound_of(f.url, (f.escape & kEscapeUrl) != 0) +
                 bound_of(f.by, (f.escape & kEscapeBy) != 0);
  for (size_t i = 0; i < tags.size(); ++i) {
    bound += json_out::literal_bound(kLitTagNext) +
             bound_of(tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  char* const base = out.begin_write(bound);
  char* p = out.put_literal(base, kLitId);
  p = put_field(out, p, f.id, (f.escape & kEscapeId) != 0);
  p = out.put_literal(p, kLitTitle);
  p = put_field(out, p, f.title, (f.escape & kEscapeTitle) != 0);
  p = out.put_literal(p, kLitUrl);
  p = put_field(out, p, f.url, (f.escape & kEscapeUrl) != 0);
  p = out.put_literal(p, kLitBy);
  p = put_field(out, p, f.by, (f.escape & kEscapeBy) != 0);
  p = out.put_literal(p, kLitTime);
  p = json_out::put_number(p, time_[doc]);
  p = out.put_literal(p, kLitScore);
  p = json_out::put_number(p, f.score);
  p = out.put_literal(p, kLitComments);
  p = json_out::put_number(p, f.comments);
  p = out.put_literal(p, kLitTags);
  for (size_t i = 0; i < tags.size(); ++i) {
    p = i == 0 ? out.put_literal(p, kLitTagFirst) : out.put_literal(p, kLitTagNext);
    p = put_field(out, p, tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  p = !tags.empty() ? out.put_literal(p, kLitTagsEnd) : out.put_literal(p, kLitNoTagsEnd);
  if (!with_text) {
    p = out.put_literal(p, kLitEnd);
    out.end_write(base, p);
    return {};
  }
  p = out.put_literal(p, kLitText);
  out.end_write(base, p);
  char* const tbase =
      out.begin_write(out.escaped_bound(body.size()) + json_out::literal_bound(kLitTextEnd));
  p = out.put_escaped(tbase, body);
  p = out.put_literal(p, kLitTextEnd);
  out.end_write(tbase, p);
  return {};
}

namespace {

template <class T>
size_t bytes_of(const std::vector<T>& v) noexcept {
  return v.capacity() * sizeof(T);
}

// An array read in place: a build's own (`store`) or the index file's mapping (`view`).
template <class T>
size_t held_bytes(const std::vector<T>& store, std::span<const T> view) noexcept {
  return std::max(store.capacity(), view.size()) * sizeof(T);
}

}  // namespace

size_t local_shard::memory_bytes() const noexcept {
  // Stored stories: a build's heads in its arena; a loaded shard's in the index file's
  // mapping, back to back in doc order from the first doc's id to the last doc's `by`.
  size_t stories = arena_bytes_;
  if (chunks_.empty() && !docs_.empty()) {
    const doc_rec& last = docs_.back();
    stories = static_cast<size_t>(last.base + read_head(last.base).size - docs_.front().base);
  }
  size_t tags = bytes_of(tag_names_);
  for (const std::string& t : tag_names_) {
    tags += t.capacity() > 15 ? t.capacity() + 1 : 0;  // beyond the small-string buffer
  }
  const prune_index& p = prune_;
  return sizeof(*this) + stories + bytes_of(docs_) + texts_bytes_ +
         std::max(text_at_store_.capacity(), text_at_.size()) * sizeof(uint64_t) +
         std::max(text_dict_store_.capacity(), text_dict_.size()) +
         (ddict_ ? ZSTD_sizeof_DDict(ddict_.get()) : 0) + held_bytes(line_store_, lines_) +
         bytes_of(time_) + bytes_of(line_) + bytes_of(doc_tags_) + tags + bytes_of(tag_escape_) +
         bytes_of(tag_table_) + bytes_of(title_len_) + bytes_of(text_len_) + bytes_of(len_norm_) +
         bytes_of(term_chars_) + bytes_of(terms_) + bytes_of(term_table_) + doc_stream_bytes_ +
         pos_stream_bytes_ + held_bytes(skips_store_, skips_) +
         held_bytes(block_max_store_, block_max_) +
         held_bytes(block_max_time_store_, block_max_time_) + bytes_of(champ_at_) +
         held_bytes(champ_part_store_, champ_part_) + held_bytes(champ_doc_store_, champ_doc_) +
         held_bytes(champ_date_store_, champ_date_) + held_bytes(p.own.set_of_term, p.set_of_term) +
         held_bytes(p.own.bits, p.bits) + held_bytes(p.own.by_time, p.by_time) +
         held_bytes(p.own.time_cum, p.time_cum) + held_bytes(p.own.tag_at, p.tag_at) +
         held_bytes(p.own.tag_docs, p.tag_docs) + held_bytes(p.own.len_class, p.len_class) +
         bytes_of(pair_terms_) + bytes_of(pair_rank_) + held_bytes(pair_docs_store_, pair_docs_) +
         bytes_of(p.impact_terms) + bytes_of(p.impact_at) +
         held_bytes(p.impact_doc_store, p.impact_doc) +
         held_bytes(p.impact_part_store, p.impact_part) +
         p.impact_rows.size_bytes();  // computed, or the index file's
}

}  // namespace tollgate::search
