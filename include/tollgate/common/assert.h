// Assertion macros (envoy's table):
//   TOLLGATE_ASSERT(c)  debug builds only; documents an invariant.
//   TOLLGATE_CHECK(c)   always on; a violated check is fatal (a bug we cannot continue past).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TOLLGATE_CHECK(cond)                                                                    \
  do {                                                                                          \
    if (__builtin_expect(!(cond), 0)) {                                                         \
      std::fprintf(stderr, "tollgate: check failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

#ifdef NDEBUG
#define TOLLGATE_ASSERT(cond) ((void)0)
#else
#define TOLLGATE_ASSERT(cond) TOLLGATE_CHECK(cond)
#endif
