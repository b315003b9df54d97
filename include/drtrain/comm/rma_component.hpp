// Choosing MPI's one-sided (RMA) component before MPI_Init, where the library's configuration
// would leave none that works across nodes.
//
// Open MPI picks one "osc" component per window: sm (one node only), rdma (needs a network
// whose BTL does RDMA and atomics: InfiniBand through openib/uct; in Open MPI 5 also TCP),
// ucx (UCX: InfiniBand, RoCE, or TCP) and, in Open MPI 4, pt2pt (RMA over point-to-point
// messages: any network). Debian's /etc/openmpi/openmpi-mca-params.conf says `osc = ^ucx,pt2pt`,
// which leaves sm and rdma: on one host every window is osc/sm, but across nodes on Ethernet no
// component accepts and MPI_Win_allocate fails with MPI_ERR_WIN.
//
// choose_rma_component() runs before MPI_Init on every rank alike:
//  - not Open MPI, or OMPI_MCA_osc set in the environment (the user chose): changes nothing;
//  - Open MPI 4 whose configured osc list (read through MPI_T, so every configuration file
//    counts) allows neither ucx nor pt2pt: sets OMPI_MCA_osc to the allowed components plus
//    pt2pt. Selection is by priority, so sm still serves single-node windows and rdma still wins
//    where it can run; pt2pt only catches the case that had nothing.
// The decision is kept for the chief to print (rma_component_note()).
#pragma once

#include <string>

namespace drt::comm {

// Before MPI_Init (and only then): see above. Never throws; on any doubt it changes nothing.
void choose_rma_component();

// One line for the run's set-up: what was chosen and why, or "" when nothing was decided.
const std::string& rma_component_note();

// Pure decision, for tests: given Open MPI's major version and the configured value of its
// "osc" variable (e.g. "^ucx,pt2pt", "" for all), the value drtrain sets OMPI_MCA_osc to, or ""
// to leave it alone.
std::string osc_override(int ompi_major, const std::string& configured);

}  // namespace drt::comm
