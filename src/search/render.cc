// local_shard::render_story (a stored story as JSON) and memory_bytes.
#include "search/shard_impl.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search {

using namespace detail;

namespace {

// The structural text of a rendered story, quotes of the string values included, with its nested
// form made at compile time.
constexpr json_literal k_lit_id{"{\"id\":\""};
constexpr json_literal k_lit_title{"\",\"title\":\""};
constexpr json_literal k_lit_url{"\",\"url\":\""};
constexpr json_literal k_lit_by{"\",\"by\":\""};
constexpr json_literal k_lit_time{"\",\"time\":"};
constexpr json_literal k_lit_score{",\"score\":"};
constexpr json_literal k_lit_comments{",\"comments\":"};
constexpr json_literal k_lit_tags{",\"tags\":["};
constexpr json_literal k_lit_tag_first{"\""};
constexpr json_literal k_lit_tag_next{"\",\""};
constexpr json_literal k_lit_tags_end{"\"]"};
constexpr json_literal k_lit_no_tags_end{"]"};
constexpr json_literal k_lit_text{",\"text\":\""};
constexpr json_literal k_lit_text_end{"\"}"};
constexpr json_literal k_lit_end{"}"};

constexpr size_t k_story_fixed_bound =
    json_out::literal_bound(k_lit_id) + json_out::literal_bound(k_lit_title) +
    json_out::literal_bound(k_lit_url) + json_out::literal_bound(k_lit_by) +
    json_out::literal_bound(k_lit_time) + json_out::literal_bound(k_lit_score) +
    json_out::literal_bound(k_lit_comments) + json_out::literal_bound(k_lit_tags) +
    json_out::literal_bound(k_lit_tags_end) + json_out::literal_bound(k_lit_end) +
    3 * json_out::k_number_bound;

// A field's bytes: copied when the load found nothing to escape in it, else escaped.
inline char* put_field(const json_out& out, char* dst, std::string_view s, bool escape) {
  return escape ? out.put_escaped(dst, s) : json_out::put_plain(dst, s);
}

}  // namespace

result<void, errc> local_shard::render_story(uint32_t doc, bool with_text, json_out& out) const {
  // One reservation for the whole summary (fields the load flagged as needing escapes count at
  // their worst case), then every piece is written straight into it; structural text is copied
  // pre-escaped. The text, only in a single story's render, is appended after: it is read
  // first (decompressed into this thread's scratch), so that a text that cannot be read fails
  // the render before anything is written.
  std::string_view body;
  if (with_text) {
    auto t = text(doc);
    if (!t) {
      return unexpected(t.error());
    }
    body = *t;
  }
  const doc_rec& r = docs_[doc];
  const field_views f(r);
  const uint32_t* tags = doc_tags_.data() + r.tags_off;
  auto bound_of = [&out](std::string_view s, bool escape) {
    return escape ? out.escaped_bound(s.size()) : s.size();
  };
  size_t bound = k_story_fixed_bound + bound_of(f.id, (r.escape & k_escape_id) != 0) +
                 bound_of(f.title, (r.escape & k_escape_title) != 0) +
                 bound_of(f.url, (r.escape & k_escape_url) != 0) +
                 bound_of(f.by, (r.escape & k_escape_by) != 0);
  for (uint32_t i = 0; i < r.tag_count; ++i) {
    bound += json_out::literal_bound(k_lit_tag_next) +
             bound_of(tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  char* const base = out.begin_write(bound);
  char* p = out.put_literal(base, k_lit_id);
  p = put_field(out, p, f.id, (r.escape & k_escape_id) != 0);
  p = out.put_literal(p, k_lit_title);
  p = put_field(out, p, f.title, (r.escape & k_escape_title) != 0);
  p = out.put_literal(p, k_lit_url);
  p = put_field(out, p, f.url, (r.escape & k_escape_url) != 0);
  p = out.put_literal(p, k_lit_by);
  p = put_field(out, p, f.by, (r.escape & k_escape_by) != 0);
  p = out.put_literal(p, k_lit_time);
  p = json_out::put_number(p, time_[doc]);
  p = out.put_literal(p, k_lit_score);
  p = json_out::put_number(p, r.score);
  p = out.put_literal(p, k_lit_comments);
  p = json_out::put_number(p, r.comments);
  p = out.put_literal(p, k_lit_tags);
  for (uint32_t i = 0; i < r.tag_count; ++i) {
    p = i == 0 ? out.put_literal(p, k_lit_tag_first) : out.put_literal(p, k_lit_tag_next);
    p = put_field(out, p, tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  p = r.tag_count > 0 ? out.put_literal(p, k_lit_tags_end) : out.put_literal(p, k_lit_no_tags_end);
  if (!with_text) {
    p = out.put_literal(p, k_lit_end);
    out.end_write(base, p);
    return {};
  }
  p = out.put_literal(p, k_lit_text);
  out.end_write(base, p);
  char* const tbase =
      out.begin_write(out.escaped_bound(body.size()) + json_out::literal_bound(k_lit_text_end));
  p = out.put_escaped(tbase, body);
  p = out.put_literal(p, k_lit_text_end);
  out.end_write(tbase, p);
  return {};
}

size_t local_shard::memory_bytes() const noexcept {
  return arena_bytes_ + texts_bytes_ + text_at_store_.capacity() * 8 + text_dict_store_.size() +
         docs_.capacity() * sizeof(doc_rec) + time_.capacity() * 8 + doc_tags_.capacity() * 4 +
         title_len_.capacity() * 8 + len_norm_.capacity() * 8 + term_chars_.capacity() +
         terms_.capacity() * sizeof(term_info) + term_table_.capacity() * sizeof(term_slot) +
         doc_stream_bytes_ + pos_stream_bytes_ + skips_.capacity() * sizeof(skip_entry) +
         block_max_.capacity() * 4 + block_max_time_.capacity() * 8 + champ_at_.capacity() * 4 +
         champ_part_.capacity() * 8 + champ_doc_.capacity() * 4 + champ_date_.capacity() * 4 +
         pair_terms_.capacity() * 4 + pair_rank_.capacity() * 2 + pair_docs_.capacity() * 4;
}

}  // namespace tollgate::search
