// Private: a corpus file's whole text for one call, shared by load_jsonl_file and the persisted
// index (index_store.cc), which builds shards from the text and writes them before the backend
// takes them.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"
#include "tollgate/search/backend.h"

namespace tollgate::search {

/// Calls `use` once with the whole text of the file at `path`: a regular file mapped read-only
/// (under a map_guard: a file shrunk meanwhile ends the process with a clear message), anything
/// else read into memory. The text is valid only during the call. Fails (line 0) when the file
/// cannot be opened or read; `use` is not called then.
result<void, load_issue> with_corpus_text(const std::string& path,
                                          const std::function<void(std::string_view)>& use);

}  // namespace tollgate::search
