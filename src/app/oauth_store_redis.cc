// The OAuth store's cluster mode (oauth_store.h): the log as a Redis list every node reads, the
// codes and the refresh tokens' single use as Redis keys. All of it under the hash tag {oauth},
// so every script's keys are in one slot of a Redis Cluster.
#include <fmt/format.h>

#include <ctime>
#include <unordered_set>

#include "oauth_store.h"
#include "oauth_util.h"
#include "tollgate/cluster/cluster.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app::oauth {
namespace {

// KEYS: log, gen. ARGV[1]: the generation read. The generation and the lines from ARGV[2] on,
// or nothing when there is no generation (a new cluster, or a Redis that lost its data).
const cluster::redis_script kRead(R"(
local g = redis.call('GET', KEYS[2])
if not g then return {} end
return {g, redis.call('LRANGE', KEYS[1], ARGV[1], -1)})");

// KEYS: log, gen. Appends the lines of ARGV[2] if the generation is still ARGV[1] (else -1: the
// node reads the log again first).
const cluster::redis_script kAppend(R"(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
for line in string.gmatch(ARGV[2], '[^\n]+') do redis.call('RPUSH', KEYS[1], line) end
return 1)");

// KEYS: log, gen. Replaces the log with the lines of ARGV[4] and starts generation ARGV[3]:
// when ARGV[1] is empty only if there is no generation (putting a node's copy back), else
// only if the generation is ARGV[1] and the log has ARGV[2] lines (a compaction that lost no
// line appended meanwhile). 1 if done, 0 if not.
const cluster::redis_script kReplace(R"(
local g = redis.call('GET', KEYS[2])
if ARGV[1] == '' then
  if g then return 0 end
elseif g ~= ARGV[1] or redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
for line in string.gmatch(ARGV[4], '[^\n]+') do redis.call('RPUSH', KEYS[1], line) end
redis.call('SET', KEYS[2], ARGV[3])
return 1)");

// KEYS: the form key. Made by the first node to ask (ARGV[1]), read by every other.
const cluster::redis_script kFormKey(R"(
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1]))");

size_t count_lines(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    n += c == '\n' ? 1 : 0;
  }
  return n;
}

}  // namespace

void store::use_redis(const cluster::settings& s, int timeout_ms, bool keep_copy) {
  keep_copy_ = keep_copy;
  auto a = cluster::parse_redis_address(s.redis);
  redis_ = std::make_unique<cluster::redis_conn>(a ? *a : cluster::redis_address{}, s.password,
                                                 timeout_ms);
  prefix_ = s.prefix;
}

std::string store::redis_key(std::string_view what) const {
  return fmt::format("{}{{oauth}}:{}", prefix_, what);
}

bool store::redis_ready() {
  if (redis_->connected()) {
    return true;
  }
  if (auto c = redis_->connect(); !c) {
    if (!redis_failing_) {
      log_error(
          "oauth: Redis {} not reachable: {} (OAuth grants, codes and tokens cannot change "
          "until it is; the tokens in force stay in force)",
          redis_->address().text, c.error().message);
    }
    redis_failing_ = true;
    return false;
  }
  return true;
}

namespace {
// A generation is "ID" (a log started or put back) or "ID/PARENT" (a compaction of PARENT).
std::string_view parent_of(std::string_view gen) {
  const size_t slash = gen.find('/');
  return slash == std::string_view::npos ? std::string_view() : gen.substr(slash + 1);
}
}  // namespace

bool store::redis_sync(int64_t now, bool* changed) {
  const std::string log_key = redis_key("log");
  const std::string gen_key = redis_key("gen");
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (!redis_ready()) {
      return false;
    }
    const int64_t from = gen_.empty() || reread_ ? 0 : offset_;
    auto r = redis_->eval(kRead, {log_key, gen_key}, {std::to_string(from)});
    if (!r) {
      if (!redis_failing_) {
        log_error("oauth: Redis {} not read: {}", log_key, r.error().message);
      }
      redis_failing_ = true;
      return false;
    }
    if (redis_failing_) {
      log_info("oauth: Redis {} answers again", redis_->address().text);
      redis_failing_ = false;
    }
    if (r->elements.size() < 2) {
      // No generation: a new cluster, or a Redis restarted empty. This node's grants (its copy,
      // or what it read before) are put back, unless another node did it first; either way
      // every node then adds what it holds and the log lacks (below).
      std::string text;
      {
        std::lock_guard g(mu_);
        text = compacted_locked(now);
      }
      auto w = redis_->eval(kReplace, {log_key, gen_key}, {"", "0", cluster::new_epoch(), text});
      if (!w) {
        return false;
      }
      if (w->integer == 1 && !text.empty()) {
        log_info(
            "oauth: Redis {} held no OAuth log (a new cluster, or Redis lost its data): this "
            "node's copy put back ({} lines)",
            log_key, count_lines(text));
      }
      reread_ = true;
      continue;
    }
    const std::string& g = r->elements[0].str;
    if (g != gen_ && from != 0) {
      reread_ = true;  // compacted or put back: read it whole
      continue;
    }
    std::string text;
    for (const cluster::redis_reply& l : r->elements[1].elements) {
      text += l.str;
      text += '\n';
    }
    const auto n = static_cast<int64_t>(r->elements[1].elements.size());
    if (changed != nullptr) {
      *changed = *changed || n > 0 || g != gen_ || reread_;
    }
    if (g != gen_ || reread_) {
      reread_ = false;
      // A new generation: read whole. A compaction of the one this node read replaces what it
      // holds; so does the first read of a start (this node's copy may be old: what was revoked
      // and compacted away since must not come back). Any other (Redis lost its data and an
      // empty node, or another node's copy, came first) is merged with what this node holds,
      // and the lines the log lacks are added to it, so no node's grants are lost.
      const bool merge = !gen_.empty() && g != gen_ && parent_of(g) != gen_;
      if (g != gen_) {
        // The form key read again (Redis may have lost it too).
        const std::string fresh = new_secret("");
        if (auto k = redis_->eval(kFormKey, {redis_key("form-key")}, {fresh});
            k && k->t == cluster::redis_reply::type::string && !k->str.empty()) {
          std::lock_guard lk(mu_);
          form_key_ = k->str;
        }
      }
      std::string copy;
      std::string missing;
      {
        std::lock_guard lk(mu_);
        const std::string prior = merge ? compacted_locked(now) : std::string();
        clear_locked();
        apply_all_locked(prior);
        apply_all_locked(text);
        copy = compacted_locked(now);
        if (merge) {
          std::unordered_set<std::string_view> have;
          for (const cluster::redis_reply& l : r->elements[1].elements) {
            have.insert(l.str);
          }
          for (size_t i = 0; i < prior.size();) {
            const size_t nl = prior.find('\n', i);
            if (have.count(std::string_view(prior).substr(i, nl - i)) == 0) {
              missing.append(prior, i, nl - i + 1);
            }
            i = nl + 1;
          }
        }
      }
      gen_ = g;
      offset_ = n;
      if (!missing.empty()) {
        // Read back at the next poll like any appended line (the offset is not moved).
        auto w = redis_->eval(kAppend, {log_key, gen_key}, {g, missing});
        log_info("oauth: Redis {} has a new log: {} lines this node held added to it{}", log_key,
                 count_lines(missing), w && w->integer == 1 ? "" : " (refused: read again)");
      }
      if (auto w =
              keep_copy_ ? quota::fs::write_file_atomic(path(), copy) : result<void, std::string>{};
          !w) {
        log_error("oauth: this node's copy of the grants not written: {}", w.error());
      }
      // A long log (most of it dead: spent and expired tokens) is rewritten once it is four
      // times what is alive; a line appended meanwhile makes the script refuse (read next time).
      if (n > 4096 && missing.empty() && static_cast<int64_t>(count_lines(copy)) * 4 < n) {
        const std::string next = cluster::new_epoch() + "/" + g;
        auto c = redis_->eval(kReplace, {log_key, gen_key}, {g, std::to_string(n), next, copy});
        if (c && c->integer == 1) {
          log_info("oauth: Redis {} compacted: {} lines to {}", log_key, n, count_lines(copy));
          gen_ = next;
          offset_ = static_cast<int64_t>(count_lines(copy));
        }
      }
      return true;
    }
    if (n > 0) {
      {
        std::lock_guard lk(mu_);
        apply_all_locked(text);
      }
      offset_ += n;
      if (auto w =
              keep_copy_ ? quota::fs::append_durable(path(), text) : result<void, std::string>{};
          !w) {
        log_error("oauth: this node's copy of the grants not appended: {}", w.error());
      }
    }
    return true;
  }
  return false;
}

std::string store::form_key() const {
  std::lock_guard g(mu_);
  return form_key_;
}

bool store::redis_append(const std::string& lines) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if ((gen_.empty() || reread_) && !redis_sync(static_cast<int64_t>(std::time(nullptr)))) {
      return false;
    }
    if (!redis_ready()) {
      return false;
    }
    auto r = redis_->eval(kAppend, {redis_key("log"), redis_key("gen")}, {gen_, lines});
    if (!r) {
      log_error("oauth: Redis {} not appended to: {}", redis_key("log"), r.error().message);
      return false;
    }
    if (r->integer == 1) {
      return true;
    }
    // Another generation (compacted, or Redis lost its data): read it, then append to it.
    reread_ = true;
  }
  return false;
}

}  // namespace tollgate::app::oauth
