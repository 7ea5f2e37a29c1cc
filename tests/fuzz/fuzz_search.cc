// Fuzz target for what a client controls in a story search: the REST query string (percent
// decoding, every parameter) and the search_stories `query` text (tokenizer, quotes and
// phrases, the planner, ranking) over the embedded sample corpus. Input layout: byte 0 selects
// the entry point, the rest is the query string (REST) or the query text (MCP argument).
// Nothing may crash; an accepted search must return a page no longer than its limit, a total
// at least that long, and render.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/query.h"

namespace {

using namespace tollgate;
using namespace tollgate::search;

struct world {
  std::unique_ptr<backend> b = load_sample(4);
  std::unique_ptr<scratch> s = b->make_scratch();
  query_string_parser qs;
  out_buffer out;
};

void check(bool ok) {
  if (!ok) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static world w;
  if (size < 1) {
    return 0;
  }
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  query_args a;
  if (data[0] % 2 == 0) {
    if (!w.qs.parse(text, a) || !validate(a)) {
      return 0;
    }
  } else {
    a.query = text;
    a.limit = 1 + data[0] % max_limit;
    a.sort = data[0] & 0x80 ? sort_order::date : sort_order::relevance;
    if (!validate(a)) {
      return 0;
    }
  }
  auto r = w.b->search(a, *w.s);
  check(r.has_value());  // every shard is in-process: a search always answers
  check(r->stories.size() <= a.limit);
  check(r->total >= r->stories.size());
  w.out.clear();
  json_out j(w.out, false);
  w.b->render(*r, j);
  check(w.out.size() > 0);
  return 0;
}
