// Error types shared by every part of drtrain, and the process rank that tags their messages.
#pragma once

#include <stdexcept>
#include <string>

namespace drt {

// Base of every error drtrain throws. The message is complete: what failed, where, what to do.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input (flags, layout, files). Thrown *identically on every rank* when the verdict
// depends only on data every rank holds, so the job can exit cleanly without MPI_Abort.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A wait that exceeded its timeout: a peer is dead, stopped or stuck.
class HangError : public Error {
 public:
  using Error::Error;
};

// The world rank of this process, for message tags; -1 until MPI is initialised.
int process_rank();
void set_process_rank(int rank);

// "rank 3" or "rank ?" when MPI is not initialised yet.
std::string rank_tag();

// The text std::strerror(err) gives ("No such file or directory"), from strerror_r: safe to call
// from any thread, unlike std::strerror.
std::string errno_text(int err);

}  // namespace drt

// Throws drt::Error with file:line when `cond` is false; for internal invariants.
#define DRT_ASSERT(cond, msg)                                                                                 \
  do {                                                                                                        \
    if (!(cond))                                                                                              \
      throw ::drt::Error(::drt::rank_tag() + ": internal error at " __FILE__ ":" + std::to_string(__LINE__) + \
                         ": " #cond " failed: " + (msg));                                                     \
  } while (0)
