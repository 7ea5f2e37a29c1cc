// Differential fuzz target: every fast envelope writer against the reference renderer, byte for
// byte. Input layout: byte 0 selects the writer, byte 1 the kind/revision, bytes 2..9 feed the
// figures, the rest splits at 0xFF bytes into id / detail / rule / payload strings.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/json_out.h"
#include "tollgate/envelope/envelope.h"
#include "tollgate/envelope/reference.h"

namespace {

using namespace tollgate;
using namespace tollgate::envelope;

void check(std::string_view fast, const std::string& ref) {
  if (fast != ref) {
    __builtin_trap();
  }
}

}  // namespace

// Over 80 lines on purpose: one switch with a case per renderer compared to the reference.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cache env{server_identity{}};
  if (size < 10) {
    return 0;
  }
  const uint8_t op = data[0] % 6;
  const uint8_t sel = data[1];
  int64_t figs[4];
  for (int i = 0; i < 4; ++i) {
    uint16_t v;
    std::memcpy(&v, data + 2 + 2 * i, 2);
    figs[i] = v % 7 == 0 ? -1 : static_cast<int64_t>(v) * 37;
  }
  std::vector<std::string> parts(4);
  size_t part = 0;
  for (size_t i = 10; i < size; ++i) {
    if (data[i] == 0xFF && part + 1 < parts.size()) {
      ++part;
      continue;
    }
    parts[part].push_back(static_cast<char>(data[i]));
  }
  // The id is raw JSON in both renderers: make it a valid token either way.
  const std::string id = parts[0].empty() ? "null" : "\"" + reference::escape(parts[0]) + "\"";
  const auto rev = static_cast<revision>(sel % num_revisions);
  out_buffer out;
  switch (op) {
    case 0: {  // success: payload written nested vs raw + escaped once by the reference
      out_buffer raw;
      env.success_prefix(out, id, rev);
      json_out n(out, true);
      json_out r(raw, false);
      n.raw("{\"s\":");
      r.raw("{\"s\":");
      n.string(parts[3]);
      r.string(parts[3]);
      n.raw(",\"n\":");
      r.raw(",\"n\":");
      n.number(figs[0]);
      r.number(figs[0]);
      n.raw("}");
      r.raw("}");
      env.success_suffix(out);
      check(out.view(), reference::success(id, rev, raw.view()));
      break;
    }
    case 1: {
      tool_error e{static_cast<tool_error_code>(sel % num_tool_error_codes),
                   figs[0],
                   figs[1],
                   figs[2],
                   figs[3],
                   {}};
      env.tool_error_response(out, id, rev, e);
      check(out.view(), reference::tool_error_response(id, rev, e));
      out.clear();
      env.tool_error_json(out, e);
      check(out.view(), reference::tool_error_json(e));
      break;
    }
    case 2: {
      rpc_error e{static_cast<rpc_error_kind>(sel % num_rpc_error_kinds), parts[1], parts[2],
                  figs[0] < 1 ? 1 : figs[0]};
      env.error_response(out, id, e);
      check(out.view(), reference::error_response(id, e));
      break;
    }
    case 3: {  // HTTP framing around an arbitrary body
      static const int statuses[] = {200, 400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503};
      const int status = statuses[sel % 12];
      const bool close = (sel & 0x80) != 0;
      std::string extra =
          parts[1].empty() ? "" : "X-Test: " + std::to_string(parts[1].size()) + "\r\n";
      out.append(parts[2]);  // earlier responses in the same buffer stay untouched
      env.head(out, status, close);
      out.append(extra);
      body_mark m = env.body_start(out);
      out.append(parts[3]);
      env.body_end(out, m);
      check(out.view(), parts[2] + reference::http(status, close, extra, parts[3]));
      break;
    }
    case 4:
      env.result_response(out, id, parts[3]);
      check(out.view(), reference::result_response(id, parts[3]));
      break;
    default:
      env.unauthorized(out, (sel & 1) != 0, (sel & 2) != 0);
      check(out.view(), reference::unauthorized((sel & 1) != 0, (sel & 2) != 0));
      break;
  }
  return 0;
}
