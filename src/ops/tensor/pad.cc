// Pad: constant, reflect, edge (and wrap) padding. Pads come from the attribute
// `pads` (`paddings` in opset 1) before opset 11 and from input 1 after, as
// [x1_begin, x2_begin, ..., x1_end, x2_end, ...]; optional axes (input 3, opset 18)
// restrict them to some dimensions. Negative pads crop (first, then padding applies).
#include <algorithm>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

// Maps each output index of one dimension to an input index, -1 for the constant.
Status MakeMap(int64_t dim, int64_t begin, int64_t end, PadMode mode, std::vector<int64_t>& map) {
  if (begin < -dim || end < -dim) return UserError("pads crop more than the extent " + std::to_string(dim));
  const int64_t lo = std::max<int64_t>(0, -begin);
  const int64_t hi = dim - std::max<int64_t>(0, -end);
  const int64_t m = hi - lo;  // extent after cropping
  if (m < 0) return UserError("pads crop more than the extent " + std::to_string(dim));
  const int64_t pb = std::max<int64_t>(0, begin), pe = std::max<int64_t>(0, end);
  SEQTO_ASSIGN_OR_RETURN(const int64_t pm, tensorops::CheckedAdd(pb, m));
  SEQTO_ASSIGN_OR_RETURN(const int64_t out, tensorops::CheckedAdd(pm, pe));
  map.resize(out);
  if (mode != PadMode::kConstant && m == 0 && out > 0) return UserError("cannot pad an empty dimension in this mode");
  for (int64_t o = 0; o < out; ++o) {
    int64_t j = o - pb;
    if (j >= 0 && j < m) {
      map[o] = lo + j;
      continue;
    }
    switch (mode) {
      case PadMode::kConstant:
        map[o] = -1;
        continue;
      case PadMode::kEdge:
        j = std::clamp<int64_t>(j, 0, m - 1);
        break;
      case PadMode::kWrap:
        j = ((j % m) + m) % m;
        break;
      case PadMode::kReflect: {
        if (m == 1) {
          j = 0;
          break;
        }
        const int64_t period = 2 * (m - 1);
        j = ((j % period) + period) % period;
        if (j >= m) j = period - j;
        break;
      }
    }
    map[o] = lo + j;
  }
  return Status::Ok();
}

// [mid_begin, mid_begin + mid_len) of the innermost output dim is a contiguous run of
// the input (the part that is not padding).
template <typename U>
void PadKernel(const U* src, U* dst, const Shape& in, const Shape& out, const std::vector<std::vector<int64_t>>& maps,
               int64_t mid_begin, int64_t mid_len, U value) {
  const int64_t r = static_cast<int64_t>(out.size());
  const std::vector<int64_t> in_strides = ContiguousStrides(in);
  const int64_t inner = out[r - 1];
  const int64_t rows = NumElements(out) / std::max<int64_t>(inner, 1);
  if (inner == 0) return;
  const std::vector<int64_t>& last = maps[r - 1];
  ParallelFor(rows, inner, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(r, 0);
    for (int64_t row = begin; row < end; ++row) {
      int64_t rem = row, off = 0;
      bool constant = false;
      for (int64_t d = r - 2; d >= 0; --d) {
        idx[d] = rem % out[d];
        rem /= out[d];
        const int64_t s = maps[d][idx[d]];
        if (s < 0)
          constant = true;
        else
          off += s * in_strides[d];
      }
      U* o = dst + row * inner;
      if (constant) {
        std::fill(o, o + inner, value);
        continue;
      }
      const U* i = src + off;
      for (int64_t k = 0; k < mid_begin; ++k) o[k] = last[k] < 0 ? value : i[last[k]];
      if (mid_len > 0) std::memcpy(o + mid_begin, i + last[mid_begin], static_cast<size_t>(mid_len) * sizeof(U));
      for (int64_t k = mid_begin + mid_len; k < inner; ++k) o[k] = last[k] < 0 ? value : i[last[k]];
    }
  });
}

Expected<PadMode> ParseMode(const std::string& s) {
  if (s == "constant") return PadMode::kConstant;
  if (s == "reflect") return PadMode::kReflect;
  if (s == "edge") return PadMode::kEdge;
  if (s == "wrap") return PadMode::kWrap;
  return UserError("attribute 'mode' is '" + s + "', expected constant, reflect, edge or wrap");
}

Expected<std::unique_ptr<Kernel>> CreatePad(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const std::string mode_name, init.node.attr_string("mode", "constant"));
  SEQTO_ASSIGN_OR_RETURN(const PadMode mode, ParseMode(mode_name));
  const bool from_inputs = init.opset >= 11;
  std::vector<int64_t> attr_pads;
  float attr_value = 0;
  if (!from_inputs) {
    const std::string name = init.opset < 2 && init.node.has_attr("paddings") ? "paddings" : "pads";
    if (!init.node.has_attr(name)) return UserError("attribute 'pads' is required");
    SEQTO_ASSIGN_OR_RETURN(attr_pads, init.node.attr_ints(name));
    SEQTO_ASSIGN_OR_RETURN(attr_value, init.node.attr_float("value", 0.f));
  }
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t r = x.rank();
    SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, x.dtype()));
    std::vector<int64_t> pads = attr_pads;
    std::byte value[8] = {};
    if (from_inputs) {
      if (!ctx.has_input(1)) return InputError(1, "'pads' is required");
      SEQTO_ASSIGN_OR_RETURN(pads, tensorops::ReadIntList(ctx.input(1), 1, "pads"));
      if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
        const Tensor& v = ctx.input(2);
        if (v.dtype() != x.dtype())
          return InputError(
              2, "constant_value has type " + DTypeName(v.dtype()) + ", the data has " + DTypeName(x.dtype()));
        if (v.numel() != 1)
          return InputError(2, "constant_value must have one element, got shape " + ShapeToString(v.shape()));
        std::memcpy(value, v.raw(), es);
      }
      if (ctx.has_input(3)) {  // axes (opset 18)
        SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> raw_axes, tensorops::ReadIntList(ctx.input(3), 3, "axes"));
        SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> axes, tensorops::NormalizeAxes(raw_axes, r, "axes"));
        const size_t na = axes.size();
        if (pads.size() != 2 * na)
          return InputError(1, "pads " + tensorops::ListToString(pads) + " must have 2 x " + std::to_string(na) +
                                   " entries (one pair per axis)");
        std::vector<int64_t> full(2 * r, 0);
        for (size_t i = 0; i < na; ++i) {
          full[axes[i]] = pads[i];
          full[axes[i] + r] = pads[i + na];
        }
        pads = std::move(full);
      }
    } else {
      SEQTO_RETURN_IF_ERROR(tensorops::ValueToBytes(attr_value, x.dtype(), value));
    }
    if (static_cast<int64_t>(pads.size()) != 2 * r)
      return UserError("pads " + tensorops::ListToString(pads) + " must have " + std::to_string(2 * r) +
                       " entries for an input of shape " + ShapeToString(x.shape()));
    if (r == 0) {
      ctx.SetOutput(0, x);
      return Status::Ok();
    }
    std::vector<std::vector<int64_t>> maps(r);
    Shape out(r);
    for (int64_t d = 0; d < r; ++d) {
      if (Status s = MakeMap(x.dim(d), pads[d], pads[d + r], mode, maps[d]); !s.ok())
        return UserError("dimension " + std::to_string(d) + " of " + ShapeToString(x.shape()) + " with pads " +
                         tensorops::ListToString(pads) + ": " + s.message());
      out[d] = static_cast<int64_t>(maps[d].size());
    }
    Tensor& y = ctx.Allocate(0, x.dtype(), out);
    if (y.numel() == 0) return Status::Ok();
    tensorops::VisitElementSize(es, [&](auto tag) {
      using U = decltype(tag);
      U v;
      std::memcpy(&v, value, sizeof(U));
      const int64_t last = r - 1;
      const int64_t mid_begin = std::max<int64_t>(0, pads[last]);
      const int64_t mid_len = x.dim(last) - std::max<int64_t>(0, -pads[last]) - std::max<int64_t>(0, -pads[last + r]);
      PadKernel(x.data<U>(), y.data<U>(), x.shape(), out, maps, mid_begin, mid_len, v);
    });
    return Status::Ok();
  });
}

}  // namespace

void RegisterPad(OpRegistry& r) { r.Register({"Pad", "", 1, CreatePad}); }

}  // namespace seqto::ops
