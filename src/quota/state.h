// Private: the immutable lookup table (a key's shared state is in tollgate/quota/key_state.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "tollgate/quota/key_state.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

/// An immutable lookup table: open addressing on the first 8 bytes of the key digest (uniform:
/// SHA-256 output), linear probing. Built by service::reload_if_changed, read by ledgers without
/// locks, freed when every ledger has passed a quiescent point after it was replaced.
struct key_table {
  uint64_t epoch = 0;
  uint32_t slot_count = 0;  ///< ledgers size their local arrays to at least this
  uint64_t mask = 0;
  /// records[0, keys) are the keys; records[keys, end) are OAuth access tokens, each a copy of
  /// its key's record under the token's digest (service::set_token_aliases).
  std::vector<key_record> records;
  size_t keys = 0;
  std::vector<int32_t> index;  ///< -1 empty, else into records
};

}  // namespace tollgate::quota
