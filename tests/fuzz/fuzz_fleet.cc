// Fuzz target for the fleet wire protocol: the shard node's request parsing
// (serve_fleet_request) and the gateway's answer parsing (remote_query::on_df / on_search /
// on_story). Input layout: byte 0 selects the entry point, the rest is the body (or, for a
// story request, the path after the prefix). Nothing may crash; a gateway that accepted an
// answer must still merge and render it.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/fleet.h"

namespace {

using namespace tollgate;
using namespace tollgate::search;

const char kCorpus[] =
    R"({"id":"1","title":"Rust compiler news","url":"u","by":"a","time":1600000000,"score":1,)"
    R"("comments":0,"tags":["rust"],"text":"the borrow checker got faster"})"
    "\n"
    R"({"id":"2","title":"Go and Rust","url":"u","by":"b","time":1600000001,"score":2,)"
    R"("comments":0,"tags":[],"text":"the rust compiler story"})"
    "\n";

struct world {
  std::unique_ptr<backend> node;
  std::unique_ptr<scratch> node_s;
  std::unique_ptr<backend> gateway;
  std::unique_ptr<scratch> gateway_s;
  world() {
    load_options o;
    o.shards = 2;
    o.threads = 1;
    load_report rep;
    node = std::move(load_jsonl(kCorpus, o, rep).value());
    node_s = node->make_scratch();
    auto shards = build_shards(kCorpus, o, rep);
    gateway = std::make_unique<backend>(std::move(shards.value()), 1);
    gateway_s = gateway->make_scratch();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static world w;
  if (size < 1) {
    return 0;
  }
  const uint8_t op = data[0] % 6;
  // the body, followed by the 64 padding bytes the HTTP layer guarantees
  std::vector<char> padded(size - 1 + 64, ' ');
  std::memcpy(padded.data(), data + 1, size - 1);
  const std::string_view body(padded.data(), size - 1);
  out_buffer out;
  switch (op) {
    case 0:
      serve_fleet_request(*w.node, *w.node_s, "POST", fleet_wire::df_path, body, out);
      break;
    case 1:
      serve_fleet_request(*w.node, *w.node_s, "POST", fleet_wire::search_path, body, out);
      break;
    case 2: {
      std::string path(fleet_wire::story_prefix);
      path.append(body);
      serve_fleet_request(*w.node, *w.node_s, "GET", path, body, out);
      break;
    }
    default: {
      remote_query q(1);
      query_args a;
      a.query = "rust \"the compiler\"";
      a.limit = 5;
      if (op == 5) {
        q.start_story("7");
        if (q.on_story(0, 200, body)) {
          json_out j(out, true);
          auto r = w.gateway->find_story("7", &q);
          if (r) {
            (void)w.gateway->render_story(*r, j, &q);
          }
        }
        break;
      }
      q.start_search(*w.gateway, a);
      if (op == 3) {
        q.on_df(0, 200, body);
        q.finish_df();
        break;
      }
      const char df[] = R"({"docs":3,"title_tokens":9,"text_tokens":20,"df":[1,1,1]})"
                        "                                                                ";
      q.on_df(0, 200, std::string_view(df, sizeof(df) - 1 - 64));
      q.finish_df();
      q.on_search(0, 200, body);
      auto r = w.gateway->search(a, *w.gateway_s, &q);
      if (r) {
        json_out j(out, true);
        w.gateway->render(*r, j);
      }
      break;
    }
  }
  return 0;
}
