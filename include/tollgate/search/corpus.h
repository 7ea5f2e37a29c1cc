// Synthetic corpus generation and the `tollgate corpus` command.
//
// generate_corpus() writes a deterministic JSON Lines corpus: the same (count, seed) gives the
// same bytes on every run and machine (integer PRNG, no libm). Shape: a Zipf vocabulary of about
// 30,000 pseudo-words with English function words and real tech words among the frequent ranks,
// occasional accented words and numbers, titles of 4-14 words, texts of 20-300 words, heavy-tailed
// scores and comment counts, times over 2019-2024, 1-4 tags from about 300, increasing decimal ids.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace tollgate::search {

/// Calls `write` with consecutive chunks of JSON Lines text (whole lines, ~64 KiB each).
void generate_corpus(uint64_t count, uint64_t seed,
                     const std::function<void(std::string_view)>& write);

/// `tollgate corpus generate --count N [--seed S]` (argv[0] is "corpus"). JSON Lines on stdout;
/// --help prints usage (exit 0); bad usage prints a message on stderr and returns 2.
int run_corpus_command(int argc, char** argv);
/// The flags `corpus generate` takes (its parser refuses any other) and its usage text, which
/// lists each.
std::span<const std::string_view> corpus_generate_flags();
std::string_view corpus_usage_text();

}  // namespace tollgate::search
