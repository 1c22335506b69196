#include "data/preprocess.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace seqto::data {

namespace {

// Largest resize/crop extent: a typo must not ask for a gigapixel image.
constexpr int64_t kMaxExtent = 1 << 15;
// Largest resized image (before any crop): both extents may be large, not both at once.
constexpr uint64_t kMaxResizedBytes = uint64_t{256} << 20;

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::string KeyError(const std::string& key, const std::string& message) {
  return "preprocess key '" + key + "': " + message;
}

Expected<double> ParseNumber(const std::string& key, const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const char* begin = text.data();
  if (begin != end && *begin == '+') ++begin;  // from_chars takes no '+'
  const auto r = std::from_chars(begin, end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || !std::isfinite(v))
    return UserError(KeyError(key, "'" + text + "' is not a number"));
  return v;
}

Expected<std::vector<double>> ParseNumbers(const std::string& key, const std::string& text) {
  std::vector<double> out;
  size_t pos = 0;
  while (true) {
    const size_t colon = text.find(':', pos);
    const std::string item = Trim(text.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos));
    SEQTO_ASSIGN_OR_RETURN(double v, ParseNumber(key, item));
    out.push_back(v);
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return out;
}

Expected<int64_t> ParseExtent(const std::string& key, const std::string& text) {
  const std::string t = Trim(text);
  int64_t v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size() || v <= 0 || v > kMaxExtent)
    return UserError(KeyError(
        key, "'" + text + "' is not a size (expected an integer from 1 to " + std::to_string(kMaxExtent) + ")"));
  return v;
}

// "256" -> (256, 0); "224x200" -> (224, 200) (rows x columns).
Status ParseSize(const std::string& key, const std::string& text, int64_t& a, int64_t& b) {
  const size_t x = text.find_first_of("xX");
  if (x == std::string::npos) {
    SEQTO_ASSIGN_OR_RETURN(a, ParseExtent(key, text));
    b = 0;
    return Status::Ok();
  }
  auto h = ParseExtent(key, text.substr(0, x));
  auto w = ParseExtent(key, text.substr(x + 1));
  if (!h || !w) return UserError(KeyError(key, "'" + text + "' is not a size (expected S or HxW, e.g. 224x224)"));
  a = *h;
  b = *w;
  return Status::Ok();
}

std::string NumberText(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  return std::string(buf, r.ptr);
}

std::string JoinNumbers(const std::vector<double>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ":" : "") + NumberText(v[i]);
  return s;
}

std::string KnownKeys() {
  std::string s;
  for (const auto& k : PreprocessKeys()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

Status SetKey(PreprocessSpec& spec, const std::string& key, const std::string& raw_value) {
  const std::string value = Trim(raw_value);
  if (std::find(PreprocessKeys().begin(), PreprocessKeys().end(), key) == PreprocessKeys().end())
    return UserError("unknown preprocess key '" + key + "' (known: " + KnownKeys() + ")");
  if (spec.has(key)) return UserError(KeyError(key, "given twice"));
  if (value.empty()) return UserError(KeyError(key, "missing value"));
  if (key == "resize") {
    int64_t a = 0, b = 0;
    SEQTO_RETURN_IF_ERROR(ParseSize(key, value, a, b));
    if (b == 0)
      spec.resize_short = a;
    else
      spec.resize_h = a, spec.resize_w = b;
  } else if (key == "crop") {
    int64_t a = 0, b = 0;
    SEQTO_RETURN_IF_ERROR(ParseSize(key, value, a, b));
    spec.crop_h = a;
    spec.crop_w = b == 0 ? a : b;
  } else if (key == "scale") {
    SEQTO_ASSIGN_OR_RETURN(spec.scale, ParseNumber(key, value));
  } else if (key == "mean") {
    SEQTO_ASSIGN_OR_RETURN(spec.mean, ParseNumbers(key, value));
  } else if (key == "std") {
    SEQTO_ASSIGN_OR_RETURN(spec.std, ParseNumbers(key, value));
    for (double s : spec.std)
      if (s == 0) return UserError(KeyError(key, "0 is not allowed (it divides)"));
  } else if (key == "color") {
    if (value == "rgb")
      spec.color = ColorMode::kRgb;
    else if (value == "bgr")
      spec.color = ColorMode::kBgr;
    else if (value == "gray" || value == "grey")
      spec.color = ColorMode::kGray;
    else if (value == "auto")
      spec.color = ColorMode::kAuto;
    else
      return UserError(KeyError(key, "'" + value + "' is not one of rgb, bgr, gray"));
  } else if (key == "layout") {
    if (value == "nchw")
      spec.layout = Layout::kNchw;
    else if (value == "nhwc")
      spec.layout = Layout::kNhwc;
    else
      return UserError(KeyError(key, "'" + value + "' is not one of nchw, nhwc"));
  }
  spec.keys.push_back(key);
  return Status::Ok();
}

// Pillow's bilinear filter and coefficient layout (Resample.c: precompute_coeffs,
// normalize_coeffs_8bpc).
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Coeffs {
  int64_t ksize = 0;
  std::vector<int64_t> bounds;  // per output: xmin, count
  std::vector<int32_t> k;       // per output: ksize fixed-point weights
};

Coeffs PrecomputeCoeffs(int64_t in_size, int64_t out_size) {
  auto filter = [](double x) {
    x = std::fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
  };
  const double scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.k.assign(static_cast<size_t>(out_size * c.ksize), 0);
  std::vector<double> w(static_cast<size_t>(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);  // truncation, as Pillow's (int) cast
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      w[static_cast<size_t>(x)] = filter((static_cast<double>(x + xmin) - center + 0.5) * ss);
      ww += w[static_cast<size_t>(x)];
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[static_cast<size_t>(x)] / ww : w[static_cast<size_t>(x)];
      c.k[static_cast<size_t>(xx * c.ksize + x)] =
          static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[static_cast<size_t>(xx * 2)] = xmin;
    c.bounds[static_cast<size_t>(xx * 2 + 1)] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// One pass along x (horizontal) or y (vertical) of an interleaved image.
Image ResamplePass(const Image& in, int64_t out_size, bool horizontal) {
  const int64_t in_size = horizontal ? in.width : in.height;
  const Coeffs c = PrecomputeCoeffs(in_size, out_size);
  Image out;
  out.channels = in.channels;
  out.width = horizontal ? out_size : in.width;
  out.height = horizontal ? in.height : out_size;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * out.channels));
  const int64_t ch = in.channels;
  const int64_t step = horizontal ? ch : in.width * ch;  // distance between taps
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      const int64_t o = horizontal ? x : y;
      const int64_t xmin = c.bounds[static_cast<size_t>(o * 2)], n = c.bounds[static_cast<size_t>(o * 2 + 1)];
      const int32_t* k = &c.k[static_cast<size_t>(o * c.ksize)];
      const uint8_t* src = horizontal ? &in.pixels[static_cast<size_t>((y * in.width + xmin) * ch)]
                                      : &in.pixels[static_cast<size_t>((xmin * in.width + x) * ch)];
      uint8_t* dst = &out.pixels[static_cast<size_t>((y * out.width + x) * ch)];
      for (int64_t cc = 0; cc < ch; ++cc) {
        int64_t ss = int64_t{1} << (kPrecisionBits - 1);
        for (int64_t i = 0; i < n; ++i) ss += static_cast<int64_t>(src[i * step + cc]) * k[i];
        dst[cc] = Clip8(ss);
      }
    }
  }
  return out;
}

// Per-channel value for mean/std lists (empty: the default).
Expected<std::vector<double>> PerChannel(const std::vector<double>& v, int64_t channels, double def,
                                         const std::string& key) {
  if (v.empty()) return std::vector<double>(static_cast<size_t>(channels), def);
  if (v.size() == 1) return std::vector<double>(static_cast<size_t>(channels), v[0]);
  if (static_cast<int64_t>(v.size()) != channels)
    return UserError(KeyError(key, "has " + std::to_string(v.size()) + " values, but the data has " +
                                       std::to_string(channels) + " channel" + (channels == 1 ? "" : "s")));
  return v;
}

}  // namespace

std::string ColorModeName(ColorMode c) {
  switch (c) {
    case ColorMode::kRgb:
      return "rgb";
    case ColorMode::kBgr:
      return "bgr";
    case ColorMode::kGray:
      return "gray";
    default:
      return "auto";
  }
}

std::string LayoutName(Layout l) { return l == Layout::kNhwc ? "nhwc" : "nchw"; }

const std::vector<std::string>& PreprocessKeys() {
  static const std::vector<std::string> kKeys = {"resize", "crop", "scale", "mean", "std", "color", "layout"};
  return kKeys;
}

bool PreprocessSpec::has(const std::string& key) const {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

std::string PreprocessSpec::ToString() const {
  std::string s;
  auto add = [&s](const std::string& item) { s += (s.empty() ? "" : ",") + item; };
  for (const auto& key : PreprocessKeys()) {
    if (!has(key)) continue;
    if (key == "resize")
      add(resize_short > 0 ? "resize=" + std::to_string(resize_short)
                           : "resize=" + std::to_string(resize_h) + "x" + std::to_string(resize_w));
    if (key == "crop") add("crop=" + std::to_string(crop_h) + "x" + std::to_string(crop_w));
    if (key == "scale") add("scale=" + NumberText(scale));
    if (key == "mean") add("mean=" + JoinNumbers(mean));
    if (key == "std") add("std=" + JoinNumbers(std));
    if (key == "color") add("color=" + ColorModeName(color));
    if (key == "layout") add("layout=" + LayoutName(layout));
  }
  return s;
}

bool PreprocessSpec::operator==(const PreprocessSpec& o) const {
  std::vector<std::string> a = keys, b = o.keys;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return resize_short == o.resize_short && resize_h == o.resize_h && resize_w == o.resize_w && crop_h == o.crop_h &&
         crop_w == o.crop_w && scale == o.scale && mean == o.mean && std == o.std && color == o.color &&
         layout == o.layout && a == b;
}

Expected<PreprocessSpec> ParsePreprocessItems(const std::vector<std::pair<std::string, std::string>>& items) {
  PreprocessSpec spec;
  for (const auto& [key, value] : items) SEQTO_RETURN_IF_ERROR(SetKey(spec, Trim(key), value));
  return spec;
}

Expected<PreprocessSpec> ParsePreprocessSpec(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> items;
  if (Trim(text).empty()) return PreprocessSpec{};
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item = Trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      if (item.empty()) return UserError("preprocess spec '" + text + "': empty item (expected key=value,...)");
      if (std::find(PreprocessKeys().begin(), PreprocessKeys().end(), item) == PreprocessKeys().end())
        return UserError("unknown preprocess key '" + item + "' (known: " + KnownKeys() + ")");
      return UserError(KeyError(item, "missing value (expected " + item + "=VALUE)"));
    }
    items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ParsePreprocessItems(items);
}

Expected<PreprocessSpec> ParsePreprocessJson(const nlohmann::json& object) {
  if (!object.is_object()) return UserError("preprocess: expected an object of key/value pairs, got " + object.dump());
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [key, value] : object.items()) {
    const std::string sep = (key == "resize" || key == "crop") ? "x" : ":";
    std::string text;
    auto scalar = [&](const nlohmann::json& v, std::string& out) -> bool {
      if (v.is_string())
        out = v.get<std::string>();
      else if (v.is_number_integer())
        out = std::to_string(v.get<int64_t>());
      else if (v.is_number())
        out = NumberText(v.get<double>());
      else
        return false;
      return true;
    };
    if (value.is_array()) {
      if (value.empty()) return UserError(KeyError(key, "empty list"));
      for (const auto& v : value) {
        std::string item;
        if (!v.is_number() || !scalar(v, item))
          return UserError(KeyError(key, value.dump() + " is not a list of numbers"));
        text += (text.empty() ? "" : sep) + item;
      }
    } else if (!scalar(value, text)) {
      if (std::find(PreprocessKeys().begin(), PreprocessKeys().end(), key) == PreprocessKeys().end())
        return UserError("unknown preprocess key '" + key + "' (known: " + KnownKeys() + ")");
      return UserError(KeyError(key, value.dump() + " is not a number, string or list of numbers"));
    }
    items.emplace_back(key, text);
  }
  return ParsePreprocessItems(items);
}

Image ResizeBilinear(const Image& image, int64_t out_height, int64_t out_width) {
  // Pillow: a pass runs only where the size changes; the horizontal pass comes first.
  Image out = image;
  if (out_width != image.width) out = ResamplePass(out, out_width, /*horizontal=*/true);
  if (out_height != image.height) out = ResamplePass(out, out_height, /*horizontal=*/false);
  return out;
}

void ResizedSize(const PreprocessSpec& spec, int64_t height, int64_t width, int64_t& out_height, int64_t& out_width) {
  out_height = height;
  out_width = width;
  if (spec.resize_h > 0) {
    out_height = spec.resize_h;
    out_width = spec.resize_w;
  } else if (spec.resize_short > 0) {
    // torchvision's Resize(int): the shorter side becomes S, the longer one
    // int(S * long / short) (truncated).
    const int64_t s = spec.resize_short;
    const bool w_short = width <= height;
    const int64_t short_side = w_short ? width : height, long_side = w_short ? height : width;
    const auto new_long = static_cast<int64_t>(static_cast<double>(s * long_side) / static_cast<double>(short_side));
    out_width = w_short ? s : new_long;
    out_height = w_short ? new_long : s;
  }
}

Expected<Tensor> PreprocessImage(const Image& image, const PreprocessSpec& spec) {
  const int64_t ch = image.channels;
  if (ch != 1 && ch != 3) return InternalError("image with " + std::to_string(ch) + " channels");
  if (image.width <= 0 || image.height <= 0) return UserError("empty image");
  int64_t h = 0, w = 0;
  ResizedSize(spec, image.height, image.width, h, w);
  if (h <= 0 || w <= 0)
    return UserError("resize gives an empty image (" + std::to_string(h) + "x" + std::to_string(w) + ") from " +
                     std::to_string(image.height) + "x" + std::to_string(image.width));
  if (static_cast<uint64_t>(h) * static_cast<uint64_t>(w) * static_cast<uint64_t>(ch) > kMaxResizedBytes)
    return UserError("resize to " + std::to_string(h) + "x" + std::to_string(w) + " from " +
                     std::to_string(image.height) + "x" + std::to_string(image.width) + " would make an image over " +
                     std::to_string(kMaxResizedBytes >> 20) + " MiB");
  const Image resized = (h != image.height || w != image.width) ? ResizeBilinear(image, h, w) : Image{};
  const Image& src = (h != image.height || w != image.width) ? resized : image;
  int64_t top = 0, left = 0, oh = h, ow = w;
  if (spec.crop_h > 0) {
    if (spec.crop_h > h || spec.crop_w > w)
      return UserError("crop " + std::to_string(spec.crop_h) + "x" + std::to_string(spec.crop_w) +
                       " is larger than the image (" + std::to_string(h) + "x" + std::to_string(w) +
                       (spec.has_resize() ? " after resize)" : "); add resize=S"));
    oh = spec.crop_h;
    ow = spec.crop_w;
    // torchvision's center_crop: int(round((H - h) / 2.0)), Python's round (half to even).
    top = static_cast<int64_t>(std::nearbyint(static_cast<double>(h - oh) / 2.0));
    left = static_cast<int64_t>(std::nearbyint(static_cast<double>(w - ow) / 2.0));
  }
  SEQTO_ASSIGN_OR_RETURN(auto mean, PerChannel(spec.mean, ch, 0.0, "mean"));
  SEQTO_ASSIGN_OR_RETURN(auto stdv, PerChannel(spec.std, ch, 1.0, "std"));
  // A lookup table per channel: 256 possible inputs.
  std::vector<float> lut(static_cast<size_t>(256 * ch));
  for (int64_t c = 0; c < ch; ++c)
    for (int v = 0; v < 256; ++v)
      lut[static_cast<size_t>(c * 256 + v)] =
          static_cast<float>((v * spec.scale - mean[static_cast<size_t>(c)]) / stdv[static_cast<size_t>(c)]);
  const bool bgr = spec.color == ColorMode::kBgr && ch == 3;
  const bool nhwc = spec.layout == Layout::kNhwc;
  Tensor out(DType::kFloat32, nhwc ? Shape{oh, ow, ch} : Shape{ch, oh, ow});
  float* o = out.data<float>();
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      const uint8_t* p = &src.pixels[static_cast<size_t>(((y + top) * w + (x + left)) * ch)];
      for (int64_t c = 0; c < ch; ++c) {
        const int64_t sc = bgr ? 2 - c : c;                         // output channel c reads source channel sc
        const float v = lut[static_cast<size_t>(c * 256 + p[sc])];  // mean/std are in output order
        if (nhwc)
          o[(y * ow + x) * ch + c] = v;
        else
          o[(c * oh + y) * ow + x] = v;
      }
    }
  return out;
}

bool ChangesValues(const PreprocessSpec& spec) { return spec.has("scale") || spec.has("mean") || spec.has("std"); }

Expected<Tensor> PreprocessTensor(const Tensor& sample, const PreprocessSpec& spec, int64_t channel_axis) {
  if (!ChangesValues(spec)) return sample;
  if (!IsSupportedDType(sample.dtype()) || sample.dtype() == DType::kBool)
    return UserError("scale/mean/std need numeric data, got " + DTypeName(sample.dtype()));
  const bool per_channel = spec.mean.size() > 1 || spec.std.size() > 1;
  int64_t channels = 1, inner = sample.numel();
  if (per_channel) {
    if (sample.rank() == 0 || channel_axis < 0 || channel_axis >= sample.rank())
      return UserError("per-channel mean/std need a channel axis, but a sample has shape " +
                       ShapeToString(sample.shape()));
    channels = sample.dim(channel_axis);
    inner = 1;
    for (int64_t d = channel_axis + 1; d < sample.rank(); ++d) inner *= sample.dim(d);
  }
  SEQTO_ASSIGN_OR_RETURN(auto mean, PerChannel(spec.mean, channels, 0.0, "mean"));
  SEQTO_ASSIGN_OR_RETURN(auto stdv, PerChannel(spec.std, channels, 1.0, "std"));
  Tensor out(DType::kFloat32, sample.shape());
  float* o = out.data<float>();
  const std::vector<double> v = sample.ToDoubles();
  for (int64_t i = 0; i < sample.numel(); ++i) {
    const size_t c = static_cast<size_t>(per_channel ? (i / inner) % channels : 0);
    o[i] = static_cast<float>((v[static_cast<size_t>(i)] * spec.scale - mean[c]) / stdv[c]);
  }
  return out;
}

Status CheckKeysAllowed(const PreprocessSpec& spec, const std::vector<std::string>& allowed, const std::string& what) {
  for (const auto& key : spec.keys)
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return UserError("preprocess key '" + key + "' applies to images only (" + what + "; it takes " + list + ")");
    }
  return Status::Ok();
}

}  // namespace seqto::data
