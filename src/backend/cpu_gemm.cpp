#include "cpu_gemm.hpp"

#include <cblas.h>

#include "drtrain/config.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#if DRT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace drt::backend::cpu {

void sgemm(bool onednn, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
#if DRT_HAVE_ONEDNN
  if (onednn) {  // row-major, as cblas_sgemm with CblasRowMajor
    const dnnl_status_t status =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success)
      throw Error(str("oneDNN sgemm failed (status ", static_cast<int>(status), ") for m=", m, " n=", n, " k=", k,
                      "; --cpu-gemm openblas avoids oneDNN"));
    return;
  }
#else
  (void)onednn;
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

bool sgemm_nests(bool onednn) { return onednn && DRT_HAVE_ONEDNN; }

}  // namespace drt::backend::cpu
