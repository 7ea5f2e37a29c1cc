// The subcommands of the tollgate binary. Each returns the process exit code: 0 ok, 2 bad usage
// or config (with a message naming the flag, or the file, line and key), 1 other failure.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <string_view>

namespace tollgate::config {
struct settings;
}

namespace tollgate::app {

int run_main(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_stdio(int argc, char** argv);
/// `tollgate config check --config FILE`.
int run_config(int argc, char** argv);
/// `tollgate oauth list|revoke ...` (oauth_cli.cc); `args` are the words after "oauth".
int run_oauth(std::span<const std::string_view> args, std::FILE* out, std::FILE* err);
/// `tollgate keys revoke KEY_ID` ends the key's OAuth grants too (a note on `out` when any): in
/// the data dir's oauth.log, or in cluster mode with [oauth] on, in Redis.
void revoke_oauth_of_key(const config::settings& s, const std::string& data_dir,
                         std::string_view key_id, std::FILE* out);

}  // namespace tollgate::app
