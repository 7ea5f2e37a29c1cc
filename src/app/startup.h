// What `serve` and `stdio` do before they answer (startup.cc): the data dir locked, the quota
// service and the corpus opened, the tables every core shares built into shared_state, the demo
// key of a first start. Each step returns 0 or the exit code to end with, after its message.
// Called on the main thread, before any core starts (the corpus load of stdio excepted: its
// own thread, see corpus_loader).
#pragma once

#include <signal.h>

#include <cstdint>
#include <optional>

#include "data_dir_lock.h"
#include "tollgate/config/config.h"

namespace tollgate::app {

struct shared_state;  // handler.h

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and returns them as a set. Call before
// any other thread starts, so every thread inherits the mask and only the caller takes them
// (serve: sigwait; stdio: a signalfd).
sigset_t block_control_signals();

// Now on the wall clock, in ns since the Unix epoch.
int64_t wall_now_ns();

// Loads the corpus (the sample, or a JSON Lines file) into st.backend; a gateway with remote
// shards gets their slots after its in-process ones (none when [fleet] local = false).
int load_corpus(shared_state& st, const config::settings& s);

// Builds everything the cores share except the engine. On failure logs and returns the code.
// `stdio`: the corpus is left to the caller (st.backend stays null; stdio loads it on a thread
// of its own while it answers the lifecycle methods).
int build_shared(shared_state& st, const config::settings& s, int cores, bool stdio,
                 std::optional<data_dir_lock>& lock);

// The shared state of a shard node (its corpus and the fleet routes; no keys, quotas or MCP)
// or of a server (build_shared, then metrics and the access log).
int build_serve_state(shared_state& st, const config::settings& s, int cores,
                      std::optional<data_dir_lock>& lock);

// The first `serve` on an empty data dir (no key ever created) makes a demo account and key.
// Whether it is needed is read before the server starts (so a running server does no such work
// on every start); the key is made once the server is listening, so a start that fails for any
// reason leaves no key behind that nobody saw, and it is put in force before it is printed.
// Sets `needed`; returns 0 or an exit code after the message.
int demo_key_needed(const config::settings& s, bool& needed);
int make_demo_key(shared_state& st, const config::settings& s);

}  // namespace tollgate::app
