// Test-only fault injection. DRT_TEST_FAULT names one fault, or several separated by commas; the
// code that can fail asks whether it is one of those requested. Faults in use:
//   checkpoint-write:<step>   PS 0 kills itself (SIGKILL) in the middle of that checkpoint
//   checkpoint-slow:<step>    every PS's background write of that checkpoint first waits until
//                             training is 350 steps further (or the run ends)
//   checkpoint-full:<step>    the last PS's background write of that checkpoint fails (disk full)
//   stop:<world rank>:<step>  that rank stops itself (SIGSTOP) before that training step
//   signal:<world rank>:<step> that rank sends itself SIGTERM (a stop signal) at that step
//                             (a worker before it, a PS after applying it)
//   slow-zeroing              every PS sleeps 1 s before clearing its new windows
//   resume-vanish             --resume: the first checkpoint PS 0 checks is moved away before the
//                             parallel open (a file removed between the two)
//   slow-steps:<world rank>   that worker sleeps 0.2 s after each step's compute (a straggler
//                             whose delay does not depend on the machine's speed)
//   checkpoint-slow-pieces    every synchronous checkpoint write sleeps 50 ms after each 1 MiB
//                             piece (a slow disk that still makes progress)
//   slow-eval                 evaluation sleeps 0.2 s after each piece of the test set
//   slow-serve:<world rank>   that PS (ssp/async/backup) naps 5 ms after each poll that found
//                             nothing to apply (a PS that falls behind its workers)
// Unset in normal runs; nothing else reads it.
#pragma once

#include <cstdlib>
#include <string>

namespace drt {

inline bool test_fault(const std::string& fault) {
  const char* spec = std::getenv("DRT_TEST_FAULT");
  if (!spec) return false;
  const std::string all = std::string(",") + spec + ",";
  return all.find("," + fault + ",") != std::string::npos;
}

}  // namespace drt
