// fleet_wire: the protocol between a gateway and its shard nodes (see fleet.h for the parts).
//
// Wire protocol (JSON bodies; never billed; every request carries the fleet secret header):
//   POST /fleet/v1/df      {"terms":["t",...]}  (+ "phrases", "phrase_terms" as below when the
//                          phrases' own frequencies weigh in the ranking)
//     -> 200 {"docs":N,"title_tokens":T,"text_tokens":X,"df":[n,...]}
//        (df in terms order, then one per phrase when phrases were sent)
//   POST /fleet/v1/search  {"terms":[...],"idf":[...],"phrases":[[first,count],...],
//                           "phrase_terms":[i,...],"phrase_idf":[...],"avgdl":A,"tags":[...],
//                           "since":S,"until":U,"sort":"relevance"|"date","k":K}
//                          (phrase_idf and avgdl optional: weight 1 / the node's own average)
//     -> 200 {"total":N,"hits":[{"key":K,"id":"...","story":{...}},...]}   (best first, <= K)
//   GET  /fleet/v1/stories/{id}  -> 200 the story object with text | 404 {"code":"not_found"}
// Doubles travel with 17 significant digits, so scores merge exactly as computed.
//
// Ranking across nodes is exactly a single node's over the union corpus (query_plan's bm25):
// for a relevance query the gateway first asks every remote for its document frequencies (of
// the terms, and of the phrases when they weigh) and corpus figures, phase 1, then sends the
// global idf and the global average story length with the query, phase 2. A sort=date query
// needs neither and takes one round trip.
#pragma once

#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate::search {

namespace fleet_wire {
inline constexpr std::string_view df_path = "/fleet/v1/df";
inline constexpr std::string_view search_path = "/fleet/v1/search";
inline constexpr std::string_view story_prefix = "/fleet/v1/stories/";
/// Lower-case, as http::request::header_value() looks names up.
inline constexpr std::string_view secret_header = "x-tollgate-fleet-secret";
/// Appends story_prefix + the id percent-encoded (every byte but A-Z a-z 0-9 - . _ ~): the
/// request-target of a story request (the node's HTTP side decodes it before
/// serve_fleet_request()).
void write_story_path(std::string_view id, out_buffer& out);
}  // namespace fleet_wire

}  // namespace tollgate::search
