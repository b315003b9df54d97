#include "drtrain/comm/rma_component.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "drtrain/core/strings.hpp"

namespace drt::comm {
namespace {

std::string g_note;

// The configured value of Open MPI's "osc" control variable, through MPI_T (allowed before
// MPI_Init). false if it cannot be read.
bool read_osc_cvar(std::string& value) {
#if DRT_SMPI
  (void)value;  // SMPI (SimGrid) has no MPI_T interface: no control variable to read
  return false;
#else
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return false;
  bool ok = false;
  int count = 0;
  MPI_T_cvar_get_num(&count);
  for (int i = 0; i < count && !ok; ++i) {
    char name[256];
    int name_len = sizeof name, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, nullptr, nullptr, &bind, &scope) !=
            MPI_SUCCESS ||
        std::strcmp(name, "osc") != 0 || type != MPI_CHAR)
      continue;
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    int elements = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &elements) != MPI_SUCCESS) break;
    std::vector<char> text(static_cast<std::size_t>(std::max(elements, 1)) + 1, '\0');
    if (MPI_T_cvar_read(handle, text.data()) == MPI_SUCCESS) {
      value = text.data();
      ok = true;
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return ok;
#endif
}

// Open MPI's major version from MPI_Get_library_version (allowed before MPI_Init), or 0 when
// the library is not Open MPI.
int open_mpi_major() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int length = 0;
  if (MPI_Get_library_version(version, &length) != MPI_SUCCESS) return 0;
  const char* at = std::strstr(version, "Open MPI v");
  return at ? std::atoi(at + std::strlen("Open MPI v")) : 0;
}

}  // namespace

std::string osc_override(int ompi_major, const std::string& configured) {
  if (ompi_major != 4) return "";  // Open MPI 5 has no pt2pt; its rdma runs over TCP
  const std::vector<std::string> known = {"sm", "rdma", "ucx", "pt2pt"};
  const bool exclude = !configured.empty() && configured[0] == '^';
  const std::vector<std::string> listed = split_list(exclude ? configured.substr(1) : configured, ',');
  auto is_listed = [&](const std::string& c) { return std::find(listed.begin(), listed.end(), c) != listed.end(); };
  std::vector<std::string> allowed;
  for (const std::string& c : known)
    if (configured.empty() || (exclude ? !is_listed(c) : is_listed(c))) allowed.push_back(c);
  auto is_allowed = [&](const std::string& c) { return std::find(allowed.begin(), allowed.end(), c) != allowed.end(); };
  if (is_allowed("ucx") || is_allowed("pt2pt")) return "";
  allowed.push_back("pt2pt");
  return join(allowed, ",");
}

void choose_rma_component() {
  const int major = open_mpi_major();
  if (major == 0) return;
  if (const char* user = std::getenv("OMPI_MCA_osc")) {
    g_note = str("one-sided component: OMPI_MCA_osc=", user, " (from the environment)");
    return;
  }
  std::string configured;
  if (!read_osc_cvar(configured)) return;
  const std::string value = osc_override(major, configured);
  if (value.empty()) {
    if (!configured.empty()) g_note = str("one-sided component: Open MPI's configured osc = ", configured);
    return;
  }
  setenv("OMPI_MCA_osc", value.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): before MPI_Init, no thread yet
  g_note = str("one-sided component: drtrain set OMPI_MCA_osc=", value,
               " because Open MPI's configuration (osc = ", configured,
               ") leaves no component that can make windows across nodes over TCP; set OMPI_MCA_osc "
               "yourself to choose (see README, 'Running across nodes')");
}

const std::string& rma_component_note() { return g_note; }

}  // namespace drt::comm
