// Deterministic synthetic corpus (see corpus.h). Everything derives from splitmix64 and integer
// arithmetic (plus IEEE division, exact everywhere), so the bytes never depend on the platform.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "search/decimal.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/progress.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

struct rng {
  uint64_t s;
  uint64_t next() noexcept {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) noexcept { return next() % n; }
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

constexpr std::array function_words = {
    "the",  "a",    "of",    "to",   "and",  "in",   "is",  "for",  "on",   "that", "with",
    "it",   "as",   "at",    "by",   "this", "from", "be",  "are",  "was",  "or",   "an",
    "we",   "you",  "not",   "but",  "have", "has",  "can", "will", "new",  "how",  "why",
    "what", "more", "about", "your", "our",  "all",  "one", "my",   "just", "now",  "use"};

constexpr std::array tech_words = {
    "rust",     "linux",      "kernel",    "database",    "python",      "google",
    "startup",  "ai",         "llm",       "gpu",         "postgres",    "sqlite",
    "compiler", "security",   "open",      "source",      "javascript",  "browser",
    "apple",    "microsoft",  "cloud",     "server",      "network",     "privacy",
    "model",    "training",   "inference", "memory",      "performance", "latency",
    "cache",    "thread",     "async",     "runtime",     "language",    "design",
    "api",      "http",       "protocol",  "encryption",  "bug",         "release",
    "version",  "benchmark",  "hardware",  "chip",        "cpu",         "storage",
    "search",   "index",      "query",     "distributed", "consensus",   "raft",
    "paxos",    "kubernetes", "docker",    "container",   "wasm",        "webassembly",
    "react",    "typescript", "go",        "java",        "haskell",     "lisp",
    "emacs",    "vim",        "git",       "github",      "programming", "software",
    "engineer", "hiring",     "funding",   "founder",     "ycombinator", "science",
    "physics",  "math",       "energy",    "battery",     "solar",       "climate",
    "space",    "rocket",     "nasa",      "spacex",      "tesla",       "car",
    "robot",    "quantum",    "crypto",    "bitcoin",     "blockchain",  "email",
    "spam",     "phone",      "android",   "ios",         "iphone",      "laptop",
    "keyboard", "display",    "monitor",   "terminal",    "shell",       "unix",
    "bsd",      "windows",    "macos",     "filesystem",  "zfs",         "btrfs",
    "ssd",      "nvme",       "io_uring",  "epoll",       "tcp",         "udp",
    "dns",      "tls",        "ssl",       "certificate", "password",    "auth",
    "oauth",    "token",      "scheduler", "garbage",     "collector",   "allocator",
    "malloc",   "pointer",    "type",      "generic",     "macro",       "parser",
    "json",     "yaml",       "sql",       "nosql",       "redis",       "kafka",
    "stream",   "queue",      "web",       "internet",    "startup",     "company",
    "market",   "economy",    "law",       "court",       "café",        "naïve",
    "résumé",   "Zürich",     "São",       "Ångström",    "Łódź",        "façade",
    "jalapeño", "über"};

constexpr std::array real_tags = {
    "rust",       "go",       "python",     "ai",       "ml",        "security", "linux",
    "databases",  "web",      "javascript", "startups", "science",   "hardware", "programming",
    "cloud",      "privacy",  "networking", "devops",   "compilers", "os",       "mobile",
    "apple",      "google",   "microsoft",  "crypto",   "space",     "energy",   "climate",
    "law",        "business", "career",     "design",   "math",      "physics",  "biology",
    "health",     "history",  "books",      "gaming",   "music",     "video",    "ask",
    "show",       "launch",   "opensource", "c",        "cpp",       "java",     "haskell",
    "lisp",       "emacs",    "vim",        "git",      "sql",       "postgres", "sqlite",
    "kubernetes", "wasm",     "llm",        "robotics"};

constexpr std::array domains = {
    "github.com",   "nytimes.com",   "arstechnica.com", "medium.com",     "blog.example.org",
    "lwn.net",      "arxiv.org",     "theverge.com",    "wikipedia.org",  "bbc.co.uk",
    "substack.com", "youtube.com",   "twitter.com",     "techcrunch.com", "wired.com",
    "nature.com",   "bloomberg.com", "reuters.com",     "acm.org",        "ieee.org"};

constexpr uint64_t vocab_size = 30000;
constexpr uint64_t tag_count = 300;
constexpr uint64_t user_count = 50000;

// Pseudo-word number i (unique: 2-syllable words have 4-5 letters, 3-syllable ones 6-7).
std::string pseudo_word(uint64_t i) {
  static constexpr char consonants[] = "bcdfghjklmnprstvz";
  static constexpr char vowels[] = "aeiou";
  static constexpr char finals[] = " nrstlx";  // ' ' = none
  uint64_t syl, j, m;
  if (i % 3 == 2) {
    syl = 3;
    m = 85ULL * 85 * 85 * 7;
    j = i / 3;
  } else {
    syl = 2;
    m = 85ULL * 85 * 7;
    j = i / 3 * 2 + i % 3;
  }
  j = (j * 7919) % m;
  std::string w;
  uint64_t fin = j % 7;
  j /= 7;
  for (uint64_t s = 0; s < syl; ++s) {
    uint64_t d = j % 85;
    j /= 85;
    w.push_back(consonants[d / 5]);
    w.push_back(vowels[d % 5]);
  }
  if (fin != 0) {
    w.push_back(finals[fin]);
  }
  return w;
}

// Zipf(s = 1) sampler over n ranks: integer weights 2^40 / (rank + 1). A guide table of 2^16
// buckets gives the first candidate rank for each slice of the range, so a sample is O(1) on
// average and returns exactly what a binary search over the cumulative weights would.
class zipf {
 public:
  explicit zipf(uint64_t n) : cum_(n), guide_(guide_size) {
    uint64_t total = 0;
    for (uint64_t r = 0; r < n; ++r) {
      total += (uint64_t{1} << 40) / (r + 1);
      cum_[r] = total;
    }
    for (uint64_t b = 0; b < guide_size; ++b) {
      uint64_t threshold = total * b / guide_size;  // total < 2^48: no overflow
      guide_[b] = static_cast<uint32_t>(std::upper_bound(cum_.begin(), cum_.end(), threshold) -
                                        cum_.begin());
    }
  }
  uint64_t sample(rng& g) const {
    const uint64_t total = cum_.back();
    uint64_t u = g.below(total);
    uint64_t r = guide_[u * guide_size / total];
    while (cum_[r] <= u) {
      ++r;
    }
    return r;
  }

 private:
  static constexpr uint64_t guide_size = 1 << 16;
  std::vector<uint64_t> cum_;
  std::vector<uint32_t> guide_;
};

struct vocabulary {
  std::vector<std::string> words;
  std::vector<std::string> tags;
  std::vector<std::string> users;
  zipf word_dist{vocab_size};
  zipf tag_dist{tag_count};
  zipf user_dist{user_count};

  vocabulary() {
    words.resize(vocab_size);
    std::vector<bool> taken(vocab_size, false);
    for (size_t i = 0; i < function_words.size(); ++i) {
      words[i] = function_words[i];
      taken[i] = true;
    }
    for (size_t i = 0; i < tech_words.size(); ++i) {
      size_t r = 50 + 13 * i;
      words[r] = tech_words[i];
      taken[r] = true;
    }
    uint64_t next = 0;
    for (size_t r = 0; r < vocab_size; ++r) {
      if (!taken[r]) {
        words[r] = pseudo_word(next++);
      }
    }
    for (size_t i = 0; i < tag_count; ++i) {
      tags.push_back(i < real_tags.size() ? std::string(real_tags[i])
                                          : "topic-" + pseudo_word(i * 7 + 1));
    }
    for (size_t i = 0; i < user_count; ++i) {
      std::string u = pseudo_word(i * 5 + 3);
      if (i % 3 == 0) {
        u += fmt::format_int(i % 1000).str();
      }
      users.push_back(std::move(u));
    }
  }
};

const vocabulary& vocab() {
  static const vocabulary v;
  return v;
}

// Appends one word: usually from the Zipf vocabulary, sometimes a number.
void append_word(std::string& out, rng& g, bool capital) {
  const vocabulary& v = vocab();
  uint64_t roll = g.below(100);
  if (roll == 0) {
    out += fmt::format_int(2000 + g.below(26)).c_str();
    return;
  }
  if (roll == 1) {
    out += fmt::format_int(1 + g.below(100)).c_str();
    return;
  }
  const std::string& w = v.words[v.word_dist.sample(g)];
  size_t start = out.size();
  out += w;
  if (capital && out[start] >= 'a' && out[start] <= 'z') {
    out[start] = static_cast<char>(out[start] - 'a' + 'A');
  }
}

void write_story(out_buffer& buf, rng& g, uint64_t id, std::string& title, std::string& text,
                 std::string& url) {
  const vocabulary& v = vocab();
  title.clear();
  uint64_t tl = 4 + g.below(11);
  for (uint64_t i = 0; i < tl; ++i) {
    if (i > 0) {
      title.push_back(' ');
    }
    append_word(title, g, i == 0);
  }
  if (g.below(20) == 0) {
    title += "?";
  }
  text.clear();
  uint64_t xl = 20 + std::min(g.below(281), g.below(281));
  uint64_t sentence_left = 0;
  for (uint64_t i = 0; i < xl; ++i) {
    bool start = sentence_left == 0;
    if (start) {
      if (i > 0) {
        text += g.below(6) == 0 ? ".\n\n" : ". ";
      }
      sentence_left = 6 + g.below(15);
    } else {
      uint64_t p = g.below(40);
      text += p == 0 ? ", " : p == 1 ? " \"" : " ";
    }
    append_word(text, g, start);
    --sentence_left;
  }
  text.push_back('.');
  url.clear();
  if (g.below(10) != 0) {
    url = "https://";
    url += domains[g.below(domains.size())];
    url += "/";
    url += fmt::format_int(g.below(1000000)).c_str();
  }
  uint64_t time = 1546300800 + g.below(6ULL * 365 * 86400);
  double u = g.unit();
  int64_t score = static_cast<int64_t>(1.0 / (u + 0.0002));
  int64_t comments = score * static_cast<int64_t>(g.below(100)) / 60;
  const std::string& by = v.users[v.user_dist.sample(g)];
  uint64_t ntags = 1 + g.below(4);
  std::array<uint64_t, 4> tags{};
  for (uint64_t i = 0; i < ntags; ++i) {
    uint64_t t = v.tag_dist.sample(g);
    while (std::find(tags.begin(), tags.begin() + i, t) != tags.begin() + i) {
      t = (t + 1) % tag_count;
    }
    tags[i] = t;
  }

  json_out j(buf, false);
  j.raw("{\"id\":\"");
  j.number(static_cast<int64_t>(id));
  j.raw("\",\"title\":");
  j.string(title);
  j.raw(",\"url\":");
  j.string(url);
  j.raw(",\"by\":");
  j.string(by);
  j.raw(",\"time\":");
  j.number(static_cast<int64_t>(time));
  j.raw(",\"score\":");
  j.number(score);
  j.raw(",\"comments\":");
  j.number(comments);
  j.raw(",\"tags\":[");
  for (uint64_t i = 0; i < ntags; ++i) {
    if (i > 0) {
      j.raw(",");
    }
    j.string(v.tags[tags[i]]);
  }
  j.raw("],\"text\":");
  j.string(text);
  j.raw("}\n");
}

}  // namespace

void generate_corpus(uint64_t count, uint64_t seed,
                     const std::function<void(std::string_view)>& write) {
  rng g{seed * 0xD1B54A32D192ED03ULL + 0x2545F4914F6CDD1DULL};
  out_buffer buf(1 << 17);
  std::string title, text, url;
  uint64_t id = 30000000 + g.below(1000);
  for (uint64_t i = 0; i < count; ++i) {
    id += 1 + g.below(40);
    write_story(buf, g, id, title, text, url);
    if (buf.size() >= (1 << 16)) {
      write(buf.view());
      buf.clear();
    }
  }
  if (!buf.empty()) {
    write(buf.view());
  }
}

namespace {

constexpr std::string_view corpus_usage =
    "usage: tollgate corpus generate --count N [--seed S]\n"
    "\n"
    "Writes a deterministic synthetic story corpus as JSON Lines on stdout: the same N and S\n"
    "give the same bytes. Each line is one story: id, title, url, by, time, score, comments,\n"
    "tags, text.\n"
    "\n"
    "  --count N   number of stories (0 to 100000000), required\n"
    "  --seed S    seed (unsigned 64-bit integer, default 1)\n"
    "  --help      this text\n";

constexpr std::string_view corpus_flags[] = {"--count", "--seed", "--help"};

int usage_error(std::string_view msg) {
  fmt::print(stderr, "tollgate corpus: {}\n{}", msg, corpus_usage);
  return 2;
}

}  // namespace

std::span<const std::string_view> corpus_generate_flags() { return corpus_flags; }
std::string_view corpus_usage_text() { return corpus_usage; }

int run_corpus_command(int argc, char** argv) {
  int i = 1;
  if (i < argc && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)) {
    std::fwrite(corpus_usage.data(), 1, corpus_usage.size(), stdout);
    return 0;
  }
  if (i >= argc) {
    return usage_error("missing subcommand (expected \"generate\")");
  }
  if (std::strcmp(argv[i], "generate") != 0) {
    return usage_error(fmt::format("unknown subcommand \"{}\" (expected \"generate\")", argv[i]));
  }
  ++i;
  bool have_count = false;
  uint64_t count = 0, seed = 1;
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fwrite(corpus_usage.data(), 1, corpus_usage.size(), stdout);
      return 0;
    }
    std::string_view name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); a.starts_with("--") && eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    if (std::find(std::begin(corpus_flags), std::end(corpus_flags), name) ==
            std::end(corpus_flags) ||
        name == "--help") {
      return usage_error(fmt::format("unknown option \"{}\"", a));
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        return usage_error(fmt::format("{} needs a value", name));
      }
      value = argv[++i];
    }
    uint64_t v;
    if (!parse_decimal(value, UINT64_MAX, v)) {
      return usage_error(fmt::format("{} must be an unsigned integer, got \"{}\"", name, value));
    }
    if (name == "--count") {
      if (v > 100000000) {
        return usage_error("--count must be at most 100000000");
      }
      count = v;
      have_count = true;
    } else {
      seed = v;
    }
  }
  if (!have_count) {
    return usage_error("--count is required");
  }
  bool failed = false;
  uint64_t written = 0;
  progress_meter progress("corpus generate", "stories");
  generate_corpus(count, seed, [&](std::string_view chunk) {
    if (!failed && std::fwrite(chunk.data(), 1, chunk.size(), stdout) != chunk.size()) {
      failed = true;
    }
    written += static_cast<uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
    progress.update(written, count == 0 ? 1.0 : static_cast<double>(written) / count);
  });
  if (std::fflush(stdout) != 0 || failed) {
    std::fputs("tollgate corpus: error writing to stdout\n", stderr);
    return 1;
  }
  return 0;
}

}  // namespace tollgate::search
