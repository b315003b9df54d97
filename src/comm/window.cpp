#include "drtrain/comm/window.hpp"

#include <exception>
#include <utility>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/core/log.hpp"
#if DRT_SMPI
#include <cstdlib>
#include <new>

#include "drtrain/core/smpi_folding.hpp"
#endif

namespace drt::comm {
namespace {

MPI_Info make_info(const WindowHints& hints) {
  MPI_Info info = MPI_INFO_NULL;
  DRT_MPI_CHECK(MPI_Info_create(&info));
  if (hints.accumulate_ordering_none) DRT_MPI_CHECK(MPI_Info_set(info, "accumulate_ordering", "none"));
  if (hints.same_op_no_op) DRT_MPI_CHECK(MPI_Info_set(info, "accumulate_ops", "same_op_no_op"));
  if (hints.shared_noncontig) DRT_MPI_CHECK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
  return info;
}

}  // namespace

Window Window::allocate(std::size_t bytes, const Comm& comm, const WindowHints& hints) {
  Window window;
  MPI_Info info = make_info(hints);
  void* base = nullptr;
#if DRT_SMPI
  if (smpi::folding()) {  // folded memory (core/smpi_folding.hpp) exposed with MPI_Win_create, on every rank
    base = smpi::folds(bytes) ? smpi::fold_alloc(bytes) : std::malloc(bytes == 0 ? 1 : bytes);
    if (base == nullptr) throw std::bad_alloc();
  }
  const int rc = smpi::folding()
                     ? MPI_Win_create(base, static_cast<MPI_Aint>(bytes), 1, info, comm.get(), &window.win_)
                     : MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, info, comm.get(), &base, &window.win_);
#else
  const int rc = MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, info, comm.get(), &base, &window.win_);
#endif
  MPI_Info_free(&info);
  DRT_MPI_CHECK(rc);
  window.base_ = base;
  window.bytes_ = bytes;
  DRT_MPI_CHECK(MPI_Win_set_errhandler(window.win_, MPI_ERRORS_RETURN));
  return window;
}

Window::~Window() { reset(); }

Window::Window(Window&& other) noexcept
    : win_(std::exchange(other.win_, MPI_WIN_NULL)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Window& Window::operator=(Window&& other) noexcept {
  if (this != &other) {
    reset();
    win_ = std::exchange(other.win_, MPI_WIN_NULL);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Window::reset() noexcept {
  if (win_ != MPI_WIN_NULL && std::uncaught_exceptions() == 0) {
    const int rc = MPI_Win_free(&win_);
    if (rc != MPI_SUCCESS) log_warning("MPI_Win_free failed: ", mpi_error_string(rc));
  }
#if DRT_SMPI
  if (smpi::folding() && base_ != nullptr) {  // Window::allocate's own memory under folding
    if (smpi::folds(bytes_)) smpi::fold_free(base_);
    else std::free(base_);
  }
#endif
  win_ = MPI_WIN_NULL;
  base_ = nullptr;
  bytes_ = 0;
}

bool Window::unified() const {
#if DRT_SMPI
  return true;  // SMPI rejects MPI_WIN_MODEL (MPI_ERR_ARG); its windows are plain memory: unified
#else
  int* model = nullptr;
  int found = 0;
  DRT_MPI_CHECK(MPI_Win_get_attr(win_, MPI_WIN_MODEL, &model, &found));
  return found && *model == MPI_WIN_UNIFIED;
#endif
}

PassiveEpoch::PassiveEpoch(const Window& window) : win_(window.get()) {
  DRT_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_));
}

PassiveEpoch::~PassiveEpoch() {
  if (std::uncaught_exceptions() > 0) return;
  const int rc = MPI_Win_unlock_all(win_);
  if (rc != MPI_SUCCESS) log_warning("MPI_Win_unlock_all failed: ", mpi_error_string(rc));
}

}  // namespace drt::comm
