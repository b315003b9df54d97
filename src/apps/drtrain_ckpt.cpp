// drtrain-ckpt: inspect drtrain checkpoints (docs/CHECKPOINT_FORMAT.md).
//   drtrain-ckpt info FILE            metadata and tensors with shapes
//   drtrain-ckpt stats FILE           per tensor: L2 norm, min, max, mean, NaN and Inf counts
//   drtrain-ckpt diff A B [--rtol R]  per tensor max |a-b| and max |a-b|/|b|; exit 1 past R (default 0)
//   drtrain-ckpt verify FILE          structure and content checksum; exit 1 if bad
//   drtrain-ckpt export FILE OUT      plain HDF5 with torch state_dict names (fc1.weight, ...)
// Exit status: 0 fine, 1 a check failed, 2 bad usage or an unreadable file.
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "drtrain/core/strings.hpp"
#include "drtrain/io/checkpoint.hpp"

namespace {

using drt::io::CheckpointFile;

int usage(const char* why) {
  std::fprintf(stderr,
               "drtrain-ckpt: %s\nusage: drtrain-ckpt info FILE | stats FILE | diff A B [--rtol R] | verify FILE | "
               "export FILE OUT\n",
               why);
  return 2;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  parts.reserve(shape.size());
  for (auto d : shape) parts.push_back(std::to_string(d));
  return "[" + drt::join(parts, ", ") + "]";
}

int info(const CheckpointFile& f) {
  const auto& m = f.meta();
  std::printf("format_version   %lld\ndrtrain_version  %s\ncreated          %s\nstep             %lld\n"
              "epoch            %lld (next step %lld of the epoch)\nsamples_seen     %lld\nglobal_batch     %lld\n"
              "model            %s\noptimizer        %s\nlayout           %lld PS, %lld workers, %lld towers\n"
              "seed             %llu\nchecksum         %016llx\n",
              static_cast<long long>(m.format_version), m.drtrain_version.c_str(), m.created.c_str(),
              static_cast<long long>(m.step), static_cast<long long>(m.epoch) + 1,
              static_cast<long long>(m.step_in_epoch) + 1, static_cast<long long>(m.samples_seen),
              static_cast<long long>(m.global_batch), m.model.c_str(), m.optimizer_config.c_str(),
              static_cast<long long>(m.num_ps), static_cast<long long>(m.num_workers), static_cast<long long>(m.towers),
              static_cast<unsigned long long>(m.seed), static_cast<unsigned long long>(m.checksum));
  // Which run wrote it (docs/CHECKPOINT_FORMAT.md, "Runs").
  const std::string parent =
      m.parent_step < 0 ? std::string("none (a run from scratch)")
      : m.parent_run_id.empty()
          ? drt::str("a checkpoint without a run id, after ", m.parent_step, " updates")
          : drt::str("run ", m.parent_run_id, ", its checkpoint after ", m.parent_step, " updates");
  if (m.run_id.empty()) std::printf("run_id           none (written before run ids: an unknown run)\n");
  else
    std::printf("run_id           %s\nparent           %s\nlineage          %s\n", m.run_id.c_str(), parent.c_str(),
                m.lineage.c_str());
  std::vector<std::string> b;
  for (auto x : m.shard_boundaries) b.push_back(std::to_string(x));
  std::printf("shard_boundaries %s\ntensors:\n", drt::join(b, " ").c_str());
  for (const std::string& d : f.datasets()) {
    const auto t = f.read(d);
    std::printf("  %-40s %-16s %zu\n", d.c_str(), shape_text(t.shape).c_str(), t.values.size());
  }
  return 0;
}

int stats(const CheckpointFile& f) {
  std::printf("%-40s %12s %12s %12s %12s %6s %6s\n", "tensor", "l2 norm", "min", "max", "mean", "nan", "inf");
  for (const std::string& d : f.datasets()) {
    const auto t = f.read(d);
    double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    std::size_t nan = 0, inf = 0, finite = 0;
    for (float v : t.values) {
      if (std::isnan(v)) ++nan;
      else if (std::isinf(v)) ++inf;
      else {
        ++finite, sum += v, sq += double(v) * v;
        lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
      }
    }
    std::printf("%-40s %12.6g %12.6g %12.6g %12.6g %6zu %6zu\n", d.c_str(), std::sqrt(sq), lo, hi,
                finite ? sum / static_cast<double>(finite) : 0.0, nan, inf);
  }
  return 0;
}

int diff(const CheckpointFile& a, const CheckpointFile& b, double rtol) {
  bool over = false;
  const auto names_a = a.datasets(), names_b = b.datasets();
  if (names_a != names_b) {
    std::printf("the files hold different tensors\n");
    return 1;
  }
  std::printf("%-40s %14s %14s\n", "tensor", "max |a-b|", "max rel");
  for (const std::string& d : names_a) {
    const auto x = a.read(d), y = b.read(d);
    if (x.shape != y.shape) {
      std::printf("%-40s shapes differ: %s vs %s\n", d.c_str(), shape_text(x.shape).c_str(),
                  shape_text(y.shape).c_str());
      over = true;
      continue;
    }
    double max_abs = 0, max_rel = 0;
    for (std::size_t i = 0; i < x.values.size(); ++i) {
      const double diff = std::abs(double(x.values[i]) - y.values[i]);
      const double rel = diff == 0 ? 0.0 : diff / std::max(std::abs(double(y.values[i])), 1e-30);
      if (std::isnan(diff) && !(std::isnan(x.values[i]) && std::isnan(y.values[i]))) max_abs = max_rel = INFINITY;
      max_abs = std::max(max_abs, diff), max_rel = std::max(max_rel, rel);
    }
    std::printf("%-40s %14.6g %14.6g\n", d.c_str(), max_abs, max_rel);
    over = over || max_rel > rtol;
  }
  std::printf(over ? "differences beyond --rtol %g\n" : "within --rtol %g\n", rtol);
  return over ? 1 : 0;
}

int verify(const CheckpointFile& f) {
  const auto params = f.datasets();
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& d : params)
    if (d.rfind("/params/", 0) == 0) shapes[d.substr(8)] = f.read(d).shape;
  if (shapes.empty()) throw drt::io::CheckpointError("no tensors under /params");
  for (const auto& slot : f.slot_names()) {
    const std::string group = "/optimizer/" + slot + "/";
    for (const auto& [name, shape] : shapes) {
      const std::string path = group + name;
      if (std::find(params.begin(), params.end(), path) == params.end() || f.read(path).shape != shape)
        throw drt::io::CheckpointError(drt::str(path, " is missing or has another shape than /params/", name));
    }
    for (const auto& d : params)  // and the other way round
      if (d.rfind(group, 0) == 0 && !shapes.count(d.substr(group.size())))
        throw drt::io::CheckpointError("/params/" + d.substr(group.size()) + " is missing (" + d + " exists)");
  }
  f.verify();
  std::printf("ok: %zu tensors, %zu optimizer slot(s), step %lld, checksum matches\n", shapes.size(),
              f.slot_names().size(), static_cast<long long>(f.meta().step));
  return 0;
}

int export_state_dict(const CheckpointFile& f, const std::string& out) {
  const hid_t file = H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw drt::Error("cannot create " + out);
  // A state_dict holds parameters and state (batch norm's running statistics) by name.
  for (const std::string& d : f.datasets()) {
    const bool param = d.rfind("/params/", 0) == 0, state = d.rfind("/state/", 0) == 0;
    if (!param && !state) continue;
    const auto t = f.read(d);
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const std::string name = d.substr(param ? 8 : 7);
    const hid_t dset = H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const herr_t rc = dset < 0 ? -1 : H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.values.data());
    if (dset >= 0) H5Dclose(dset);
    H5Sclose(space);
    if (rc < 0) {
      H5Fclose(file);
      throw drt::Error(drt::str("cannot write ", d, " to ", out));
    }
  }
  const std::string model = f.meta().model;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, model.size());
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, "model", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, model.data());
  H5Aclose(attr);
  H5Sclose(scalar);
  H5Tclose(type);
  H5Fclose(file);
  std::printf(
      "wrote %s: the parameters as torch state_dict entries (load: {k: torch.from_numpy(f[k][()]) for k in f})\n",
      out.c_str());
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 3) return usage("missing arguments");
  const std::string command = argv[1];
  if (command == "diff") {
    if (argc != 4 && !(argc == 6 && std::strcmp(argv[4], "--rtol") == 0)) return usage("diff takes A B [--rtol R]");
    const double rtol = argc == 6 ? std::atof(argv[5]) : 0.0;
    return diff(CheckpointFile(argv[2]), CheckpointFile(argv[3]), rtol);
  }
  if (command == "export") {
    if (argc != 4) return usage("export takes FILE OUT");
    return export_state_dict(CheckpointFile(argv[2]), argv[3]);
  }
  if (argc != 3) return usage(("too many arguments for " + command).c_str());
  if (command == "info") return info(CheckpointFile(argv[2]));
  if (command == "stats") return stats(CheckpointFile(argv[2]));
  if (command == "verify") return verify(CheckpointFile(argv[2]));
  return usage(("unknown command '" + command + "'").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const drt::io::CheckpointError& e) {
    std::fprintf(stderr, "drtrain-ckpt: %s: %s\n", argc > 2 ? argv[argc - 1] : "", e.what());
    return argc > 1 && std::strcmp(argv[1], "verify") == 0 ? 1 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drtrain-ckpt: %s\n", e.what());
    return 2;
  }
}
