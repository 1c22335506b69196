#include "eval/metrics.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>

#include "core/shape.h"

namespace seqto {
namespace {

// A score tensor seen as N samples of C scores.
struct Rows {
  int64_t n = 0;
  int64_t c = 0;
};

bool IsReadable(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || VisitNumeric(t, [](auto) {});
}

Expected<Rows> Inspect(const Tensor& t, const char* what) {
  if (!t.defined()) return UserError(std::string(what) + " tensor is undefined");
  if (!IsReadable(t.dtype())) return UserError(std::string(what) + " " + t.Describe() + " is not numeric");
  if (t.rank() < 1)
    return UserError(std::string(what) + " " + t.Describe() + " is a scalar; expected samples along axis 0");
  Rows r;
  r.n = t.dim(0);
  r.c = NumElements(Shape(t.shape().begin() + 1, t.shape().end()));
  // INT64_MAX means the per-sample extent overflowed, possible only when N = 0.
  if (r.c < 1 || r.c == std::numeric_limits<int64_t>::max())
    return UserError(std::string(what) + " " + t.Describe() + " has no usable class scores per sample");
  return r;
}

// Copies sample `row` (c scores) into `out` as doubles.
void ReadRow(const Tensor& t, int64_t row, int64_t c, double* out) {
  const size_t base = static_cast<size_t>(row) * static_cast<size_t>(c);
  if (t.dtype() == DType::kFloat16) {
    const uint16_t* p = t.data<uint16_t>() + base;
    for (int64_t i = 0; i < c; ++i) out[i] = HalfToFloat(p[i]);
    return;
  }
  if (t.dtype() == DType::kBFloat16) {
    const uint16_t* p = t.data<uint16_t>() + base;
    for (int64_t i = 0; i < c; ++i) out[i] = BFloat16ToFloat(p[i]);
    return;
  }
  VisitNumeric(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>() + base;
    for (int64_t i = 0; i < c; ++i) out[i] = static_cast<double>(p[i]);
  });
}

// Ranking keys: NaN counts as -infinity so that every comparison below is a strict
// weak order and a NaN never beats a number.
void RankKeys(const double* in, int64_t c, double* out) {
  for (int64_t i = 0; i < c; ++i) out[i] = std::isnan(in[i]) ? -std::numeric_limits<double>::infinity() : in[i];
}

// Class i ranks above class j: higher score, or equal score and lower index.
inline bool Better(const double* s, int64_t i, int64_t j) { return s[i] > s[j] || (s[i] == s[j] && i < j); }

int64_t ArgMax(const double* s, int64_t c) {
  int64_t best = 0;
  for (int64_t i = 1; i < c; ++i)
    if (s[i] > s[best]) best = i;  // strict: an equal later score keeps the lower index
  return best;
}

// The k best classes, best first. k is small (<= 5 here), so an insertion into a
// k-long list beats sorting C scores.
void TopK(const double* s, int64_t c, int64_t k, std::vector<int64_t>* out) {
  out->clear();
  for (int64_t i = 0; i < c; ++i) {
    if (static_cast<int64_t>(out->size()) == k && !Better(s, i, out->back())) continue;
    if (static_cast<int64_t>(out->size()) == k) out->pop_back();
    auto pos = out->end();
    while (pos != out->begin() && Better(s, i, *(pos - 1))) --pos;
    out->insert(pos, i);
  }
}

// Whether class `label` is among the k best: fewer than k classes rank above it.
bool InTopK(const double* s, int64_t c, int64_t label, int64_t k) {
  int64_t above = 0;
  for (int64_t j = 0; j < c && above < k; ++j)
    if (Better(s, j, label)) ++above;
  return above < k;
}

inline int Sign(double a, double b) { return (a > b) - (a < b); }

// Kendall's tau-b of x and y (n values each); see metrics.h for the undefined cases.
double TauB(const double* x, const double* y, int64_t n) {
  if (n < 2) return 1;
  const int64_t n0 = n * (n - 1) / 2;
  int64_t n1 = 0, n2 = 0, nc = 0, nd = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      const int dx = Sign(x[i], x[j]), dy = Sign(y[i], y[j]);
      if (dx == 0) ++n1;
      if (dy == 0) ++n2;
      if (dx != 0 && dy != 0) (dx == dy ? nc : nd)++;
    }
  }
  if (n1 == n0 && n2 == n0) return 1;
  if (n1 == n0 || n2 == n0) return 0;
  return static_cast<double>(nc - nd) / std::sqrt(static_cast<double>(n0 - n1) * static_cast<double>(n0 - n2));
}

// log(sum(exp(v - max))) and max, for a stable log-softmax.
void LogSumExp(const double* v, int64_t c, double* max_out, double* lse_out) {
  double m = v[0];
  for (int64_t i = 1; i < c; ++i) m = v[i] > m ? v[i] : m;
  double sum = 0;
  for (int64_t i = 0; i < c; ++i) sum += std::exp(v[i] - m);
  *max_out = m;
  *lse_out = std::log(sum);
}

// KL(softmax(r) || softmax(q)) of one sample.
double KlRow(const double* r, const double* q, int64_t c) {
  double mr, lr, mq, lq;
  LogSumExp(r, c, &mr, &lr);
  LogSumExp(q, c, &mq, &lq);
  double kl = 0;
  for (int64_t i = 0; i < c; ++i) {
    const double log_p = (r[i] - mr) - lr;
    const double p = std::exp(log_p);
    if (p == 0) continue;  // 0 * log(0 / q) = 0, even where q = 0
    const double log_q = (q[i] - mq) - lq;
    kl += p * (log_p - log_q);
  }
  return kl < 0 ? 0 : kl;  // rounding; keeps NaN
}

std::string ClassCountMismatch(int64_t got, int64_t had) {
  return "batch has " + std::to_string(got) + " classes per sample, earlier batches had " + std::to_string(had);
}

Status CheckLabels(const Rows& r, const std::vector<int64_t>& labels, int64_t first_sample) {
  if (static_cast<int64_t>(labels.size()) != r.n)
    return UserError(std::to_string(labels.size()) + " labels for " + std::to_string(r.n) + " samples");
  for (int64_t i = 0; i < r.n; ++i) {
    if (labels[i] < 0 || labels[i] >= r.c)
      return UserError("label " + std::to_string(labels[i]) + " of sample " + std::to_string(first_sample + i) +
                       " is outside the " + std::to_string(r.c) + " classes [0, " + std::to_string(r.c) + ")");
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------- accuracy

Expected<std::vector<int64_t>> Top1(const Tensor& scores) {
  SEQTO_ASSIGN_OR_RETURN(Rows r, Inspect(scores, "scores"));
  std::vector<int64_t> out(static_cast<size_t>(r.n));
  std::vector<double> raw(static_cast<size_t>(r.c)), key(static_cast<size_t>(r.c));
  for (int64_t i = 0; i < r.n; ++i) {
    ReadRow(scores, i, r.c, raw.data());
    RankKeys(raw.data(), r.c, key.data());
    out[i] = ArgMax(key.data(), r.c);
  }
  return out;
}

Expected<double> TopKAccuracy(const Tensor& scores, const std::vector<int64_t>& labels, int k) {
  if (k < 1) return UserError("top-k accuracy needs k >= 1, got " + std::to_string(k));
  SEQTO_ASSIGN_OR_RETURN(Rows r, Inspect(scores, "scores"));
  if (r.n == 0) return UserError("scores " + scores.Describe() + " have no samples");
  SEQTO_RETURN_IF_ERROR(CheckLabels(r, labels, 0));
  const int64_t kk = std::min<int64_t>(k, r.c);
  std::vector<double> raw(static_cast<size_t>(r.c)), key(static_cast<size_t>(r.c));
  int64_t hits = 0;
  for (int64_t i = 0; i < r.n; ++i) {
    ReadRow(scores, i, r.c, raw.data());
    RankKeys(raw.data(), r.c, key.data());
    hits += InTopK(key.data(), r.c, labels[i], kk);
  }
  return 100.0 * static_cast<double>(hits) / static_cast<double>(r.n);
}

Status AccuracyAccumulator::Add(const Tensor& scores, const std::vector<int64_t>& labels) {
  auto rows = Inspect(scores, "scores");
  if (!rows.ok()) return rows.status();
  const Rows r = *rows;
  if (classes_ >= 0 && r.c != classes_) return UserError(ClassCountMismatch(r.c, classes_));
  SEQTO_RETURN_IF_ERROR(CheckLabels(r, labels, samples_));
  if (r.n == 0) return Status::Ok();
  classes_ = r.c;
  std::vector<double> raw(static_cast<size_t>(r.c)), key(static_cast<size_t>(r.c));
  const int64_t k5 = std::min<int64_t>(5, r.c);
  for (int64_t i = 0; i < r.n; ++i) {
    ReadRow(scores, i, r.c, raw.data());
    RankKeys(raw.data(), r.c, key.data());
    top1_hits_ += InTopK(key.data(), r.c, labels[i], 1);
    top5_hits_ += InTopK(key.data(), r.c, labels[i], k5);
  }
  samples_ += r.n;
  return Status::Ok();
}

Expected<AccuracyMetrics> AccuracyAccumulator::Result() const {
  if (samples_ == 0) return UserError("accuracy: no samples");
  AccuracyMetrics m;
  m.samples = samples_;
  m.classes = classes_;
  m.top1 = 100.0 * static_cast<double>(top1_hits_) / static_cast<double>(samples_);
  m.top5 = 100.0 * static_cast<double>(top5_hits_) / static_cast<double>(samples_);
  return m;
}

// ---------------------------------------------------------------- SQNR

namespace {
template <typename T>
void AccumulateSqnr(const T* x, const T* y, size_t n, double* signal, double* noise) {
  double s = *signal, e = *noise;
  for (size_t i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    const double d = xi - static_cast<double>(y[i]);
    s += xi * xi;
    e += d * d;
  }
  *signal = s;
  *noise = e;
}

double SqnrFromSums(double signal_sumsq, double noise_sumsq) {
  const double eps = DBL_EPSILON;
  // Written out rather than std::max/fmax so that a NaN sum stays NaN.
  const double s = std::sqrt(signal_sumsq), e = std::sqrt(noise_sumsq);
  const double num = s < eps ? eps : s;
  const double den = e < eps ? eps : e;
  return 20.0 * std::log10(num / den);
}
}  // namespace

double SqnrDb(const double* x, const double* y, size_t n) {
  SqnrAccumulator acc;
  acc.Add(x, y, n);
  return acc.Db();
}

double SqnrDb(const float* x, const float* y, size_t n) {
  SqnrAccumulator acc;
  acc.Add(x, y, n);
  return acc.Db();
}

void SqnrAccumulator::Add(const double* x, const double* y, size_t n) {
  AccumulateSqnr(x, y, n, &signal_sumsq_, &noise_sumsq_);
  count_ += n;
}

void SqnrAccumulator::Add(const float* x, const float* y, size_t n) {
  AccumulateSqnr(x, y, n, &signal_sumsq_, &noise_sumsq_);
  count_ += n;
}

Status SqnrAccumulator::Add(const Tensor& x, const Tensor& y) {
  if (!x.defined() || !y.defined()) return UserError("SQNR of an undefined tensor");
  if (!IsReadable(x.dtype())) return UserError("SQNR: " + x.Describe() + " is not numeric");
  if (!IsReadable(y.dtype())) return UserError("SQNR: " + y.Describe() + " is not numeric");
  if (x.numel() != y.numel())
    return UserError("SQNR: " + x.Describe() + " and " + y.Describe() + " differ in element count");
  if (x.dtype() == DType::kFloat32 && y.dtype() == DType::kFloat32) {
    Add(x.data<float>(), y.data<float>(), static_cast<size_t>(x.numel()));
  } else if (x.dtype() == DType::kFloat64 && y.dtype() == DType::kFloat64) {
    Add(x.data<double>(), y.data<double>(), static_cast<size_t>(x.numel()));
  } else {
    const std::vector<double> xd = x.ToDoubles(), yd = y.ToDoubles();
    Add(xd.data(), yd.data(), xd.size());
  }
  return Status::Ok();
}

double SqnrAccumulator::Db() const { return SqnrFromSums(signal_sumsq_, noise_sumsq_); }

// ---------------------------------------------------------------- agreement

Status AgreementAccumulator::Add(const Tensor& ref, const Tensor& cand) {
  auto rr = Inspect(ref, "reference");
  if (!rr.ok()) return rr.status();
  auto rc = Inspect(cand, "candidate");
  if (!rc.ok()) return rc.status();
  if (ref.shape() != cand.shape())
    return UserError("reference " + ref.Describe() + " and candidate " + cand.Describe() + " differ in shape");
  const Rows r = *rr;
  if (classes_ >= 0 && r.c != classes_) return UserError(ClassCountMismatch(r.c, classes_));
  if (r.n == 0) return Status::Ok();
  classes_ = r.c;

  const size_t c = static_cast<size_t>(r.c);
  const int64_t k = std::min<int64_t>(5, r.c);
  std::vector<double> ref_raw(c), cand_raw(c), ref_key(c), cand_key(c);
  std::vector<int64_t> ref_top, cand_top;
  double x[5], y[5];
  for (int64_t i = 0; i < r.n; ++i) {
    ReadRow(ref, i, r.c, ref_raw.data());
    ReadRow(cand, i, r.c, cand_raw.data());
    RankKeys(ref_raw.data(), r.c, ref_key.data());
    RankKeys(cand_raw.data(), r.c, cand_key.data());

    top1_differ_ += ArgMax(ref_key.data(), r.c) != ArgMax(cand_key.data(), r.c);

    TopK(ref_key.data(), r.c, k, &ref_top);
    TopK(cand_key.data(), r.c, k, &cand_top);
    int64_t common = 0;
    for (int64_t a : ref_top) common += std::find(cand_top.begin(), cand_top.end(), a) != cand_top.end();
    overlap_sum_ += static_cast<double>(common) / static_cast<double>(k);

    for (int64_t j = 0; j < k; ++j) {
      x[j] = ref_key[ref_top[j]];
      y[j] = cand_key[ref_top[j]];
    }
    tau_sum_ += TauB(x, y, k);

    kl_sum_ += KlRow(ref_raw.data(), cand_raw.data(), r.c);
    sqnr_.Add(ref_raw.data(), cand_raw.data(), c);
  }
  samples_ += r.n;
  return Status::Ok();
}

Expected<AgreementMetrics> AgreementAccumulator::Result() const {
  if (samples_ == 0) return UserError("agreement: no samples");
  const double n = static_cast<double>(samples_);
  AgreementMetrics m;
  m.samples = samples_;
  m.classes = classes_;
  m.top1_disagreement = 100.0 * static_cast<double>(top1_differ_) / n;
  m.top5_overlap = overlap_sum_ / n;
  m.kendall_tau = tau_sum_ / n;
  m.sqnr_db = sqnr_.Db();
  m.kl_divergence = kl_sum_ / n;
  return m;
}

Expected<AgreementMetrics> Agreement(const Tensor& ref, const Tensor& cand) {
  AgreementAccumulator acc;
  SEQTO_RETURN_IF_ERROR(acc.Add(ref, cand));
  return acc.Result();
}

Expected<double> Top1Disagreement(const Tensor& ref, const Tensor& cand) {
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(ref, cand));
  return m.top1_disagreement;
}

Expected<double> Top5Overlap(const Tensor& ref, const Tensor& cand) {
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(ref, cand));
  return m.top5_overlap;
}

Expected<double> KendallTauTop5(const Tensor& ref, const Tensor& cand) {
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(ref, cand));
  return m.kendall_tau;
}

Expected<double> OutputSqnrDb(const Tensor& ref, const Tensor& cand) {
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(ref, cand));
  return m.sqnr_db;
}

Expected<double> KlDivergence(const Tensor& ref, const Tensor& cand) {
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(ref, cand));
  return m.kl_divergence;
}

}  // namespace seqto
