// local_shard phrase checks: whether a phrase occurs in the cursors' current doc, and how often.
#include "search/shard_impl.h"

#include <cstdint>
#include <vector>

namespace tollgate::search {

using namespace detail;

namespace {
// Decodes the positions of a cursor's current doc into out.
void decode_positions(const posting_cursor& c, std::vector<uint32_t>& out) {
  out.clear();
  const uint8_t* p = c.pos;
  const uint8_t* end = p + c.pos_len;
  uint32_t v = 0;
  bool first = true;
  while (p < end) {
    uint32_t d = read_varint(p);
    v = first ? d : v + d;
    first = false;
    out.push_back(v);
  }
}
}  // namespace

namespace {
// Two-word phrase: walks both position lists (varint deltas) in step and stops at the first p
// with p + 1 in the second list, decoding nothing into memory.
bool adjacent_pair(const posting_cursor& a, const posting_cursor& b) noexcept {
  const uint8_t* pa = a.pos;
  const uint8_t* ea = pa + a.pos_len;
  const uint8_t* pb = b.pos;
  const uint8_t* eb = pb + b.pos_len;
  if (pa >= ea || pb >= eb) {
    return false;
  }
  uint32_t va = read_varint(pa) + 1;  // the position the second word must take
  uint32_t vb = read_varint(pb);
  while (va != vb) {
    // advance whichever list is behind until it catches up or passes the other
    while (va < vb) {
      if (pa >= ea) {
        return false;
      }
      va += read_varint(pa);
    }
    while (vb < va) {
      if (pb >= eb) {
        return false;
      }
      vb += read_varint(pb);
    }
  }
  return true;
}
}  // namespace

bool local_shard::phrase_match(const query_plan& plan, shard_workspace& ws) const {
  for (const phrase_span& ph : plan.phrases) {
    if (ph.count < 2) {
      continue;
    }
    if (ph.count == 2) {
      if (!adjacent_pair(ws.cursors[plan.phrase_terms[ph.first]],
                         ws.cursors[plan.phrase_terms[ph.first + 1]])) {
        return false;
      }
      continue;
    }
    decode_positions(ws.cursors[plan.phrase_terms[ph.first]], ws.pos_a);
    for (uint32_t j = 1; j < ph.count && !ws.pos_a.empty(); ++j) {
      decode_positions(ws.cursors[plan.phrase_terms[ph.first + j]], ws.pos_b);
      // keep p in pos_a where p + j is in pos_b (both ascending)
      size_t w = 0, b = 0;
      for (size_t a = 0; a < ws.pos_a.size(); ++a) {
        uint32_t want = ws.pos_a[a] + j;
        while (b < ws.pos_b.size() && ws.pos_b[b] < want) {
          ++b;
        }
        if (b < ws.pos_b.size() && ws.pos_b[b] == want) {
          ws.pos_a[w++] = ws.pos_a[a];
        }
      }
      ws.pos_a.resize(w);
    }
    if (ws.pos_a.empty()) {
      return false;
    }
  }
  return true;
}

namespace {
// Two-word phrase, every occurrence: like adjacent_pair, without stopping at the first; counts
// the occurrences starting in the title (positions below tl) and in the text.
void adjacent_pairs(const posting_cursor& a, const posting_cursor& b, uint32_t tl,
                    uint32_t& in_title, uint32_t& in_text) noexcept {
  const uint8_t* pa = a.pos;
  const uint8_t* ea = pa + a.pos_len;
  const uint8_t* pb = b.pos;
  const uint8_t* eb = pb + b.pos_len;
  if (pa >= ea || pb >= eb) {
    return;
  }
  uint32_t va = read_varint(pa) + 1;  // the position the second word must take
  uint32_t vb = read_varint(pb);
  while (true) {
    if (va == vb) {
      (va - 1 < tl ? in_title : in_text) += 1;
      if (pa >= ea || pb >= eb) {
        return;
      }
      va += read_varint(pa);
      vb += read_varint(pb);
    } else if (va < vb) {
      if (pa >= ea) {
        return;
      }
      va += read_varint(pa);
    } else {
      if (pb >= eb) {
        return;
      }
      vb += read_varint(pb);
    }
  }
}
}  // namespace

double local_shard::phrase_freq(const query_plan& plan, const phrase_span& ph,
                                shard_workspace& ws, uint32_t doc) const {
  const uint32_t tl = title_len_[doc];  // title positions are 0..tl-1, text ones from tl + 1
  uint32_t in_title = 0, in_text = 0;
  if (ph.count == 2) {
    adjacent_pairs(ws.cursors[plan.phrase_terms[ph.first]],
                   ws.cursors[plan.phrase_terms[ph.first + 1]], tl, in_title, in_text);
    return w_title * in_title + w_text * in_text;
  }
  decode_positions(ws.cursors[plan.phrase_terms[ph.first]], ws.pos_a);
  for (uint32_t j = 1; j < ph.count && !ws.pos_a.empty(); ++j) {
    decode_positions(ws.cursors[plan.phrase_terms[ph.first + j]], ws.pos_b);
    size_t w = 0, bi = 0;
    for (size_t a = 0; a < ws.pos_a.size(); ++a) {
      const uint32_t want = ws.pos_a[a] + j;
      while (bi < ws.pos_b.size() && ws.pos_b[bi] < want) {
        ++bi;
      }
      if (bi < ws.pos_b.size() && ws.pos_b[bi] == want) {
        ws.pos_a[w++] = ws.pos_a[a];
      }
    }
    ws.pos_a.resize(w);
  }
  for (uint32_t p : ws.pos_a) {
    (p < tl ? in_title : in_text) += 1;
  }
  return w_title * in_title + w_text * in_text;
}


}  // namespace tollgate::search
