// Preprocessing of input samples, from the `--preprocess` spec (README.md, Commands)
// or the same keys in a config file. Both parsers produce the same PreprocessSpec.
//
// Image pipeline, in this order (what torchvision's Resize / CenterCrop / ToTensor /
// Normalize do on a PIL image):
//   1. decode to 8-bit gray or RGB (`color`; RGB -> gray is PIL's convert("L"):
//      L = (19595 R + 38470 G + 7471 B + 32768) >> 16)
//   2. resize (`resize=S`: the shorter side becomes S, the longer one
//      trunc(S * long / short); `resize=HxW`: exactly H rows, W columns)
//   3. center crop (`crop=S` or `crop=HxW`; top = round_half_even((H - h) / 2), left alike)
//   4. x = pixel * scale; x = (x - mean[c]) / std[c]   (float32 result)
//   5. channel order (`bgr` swaps R and B) and layout (`nchw`: [C,H,W], `nhwc`: [H,W,C])
// Per-channel mean/std values are in output channel order (B, G, R for bgr, as
// Caffe-style means are written).
//
// Resize is Pillow's BILINEAR resample, reproduced exactly (8-bit): a triangle filter
// sampled at half-pixel centers, widened by the scale factor when shrinking
// (antialiasing, like Pillow and torchvision's antialias=True), weights renormalized
// at the borders, 22-bit fixed-point coefficients, horizontal pass first, each pass
// rounded (half up) and clamped to 0..255. Upscaling is therefore ordinary bilinear
// interpolation with half-pixel centers and clamped edges.
//
// Non-image data (.npy, idx, ONNX test sets) takes only scale, mean and std (the
// channel axis for per-channel values is given by `layout`: axis 0 of a sample for
// nchw, the last axis for nhwc); an idx image set also takes `color=gray` and
// `layout`, which gives its N x H x W images a channel axis (N x 1 x H x W for nchw).
// Any other key on non-image data is an error naming the key.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto::data {

enum class ColorMode { kAuto, kRgb, kBgr, kGray };  // kAuto: as the file is (gray or RGB)
enum class Layout { kNchw, kNhwc };

std::string ColorModeName(ColorMode c);  // "auto", "rgb", "bgr", "gray"
std::string LayoutName(Layout l);        // "nchw", "nhwc"

struct PreprocessSpec {
  // Resize: resize_short > 0 scales the shorter side to it; resize_h/resize_w > 0
  // resize exactly. At most one of the two forms is set; neither: no resize.
  int64_t resize_short = 0;
  int64_t resize_h = 0, resize_w = 0;
  int64_t crop_h = 0, crop_w = 0;  // 0: no crop
  double scale = 1.0;
  std::vector<double> mean;  // empty: 0; one value: every channel; else one per channel
  std::vector<double> std;   // empty: 1; same rule
  ColorMode color = ColorMode::kAuto;
  Layout layout = Layout::kNchw;
  // The keys that were given (in the order given), so non-image datasets can reject
  // keys that do not apply to them and `layout` can be told apart from its default.
  std::vector<std::string> keys;

  bool has(const std::string& key) const;
  bool has_resize() const { return resize_short > 0 || resize_h > 0; }
  // The canonical spec string (keys in a fixed order; parses back to an equal spec).
  std::string ToString() const;
  // Equal settings (the order of `keys` does not matter).
  bool operator==(const PreprocessSpec& other) const;
};

// The keys, in canonical order: resize, crop, scale, mean, std, color, layout.
const std::vector<std::string>& PreprocessKeys();

// "resize=256,crop=224,scale=0.00392157,mean=0.485:0.456:0.406,std=...,color=rgb,layout=nchw".
// Empty text: the default spec. Errors name the key: "unknown preprocess key 'foo'
// (known: resize, crop, ...)", "preprocess key 'std': 0 is not allowed".
Expected<PreprocessSpec> ParsePreprocessSpec(const std::string& text);

// The same from key/value pairs (a config file's object after conversion to text:
// numbers as written, arrays joined with ':' for mean/std and 'x' for resize/crop).
Expected<PreprocessSpec> ParsePreprocessItems(const std::vector<std::pair<std::string, std::string>>& items);

// The same from a JSON object (a config file's "preprocess") with the same keys, e.g.
// {"resize": 256, "crop": [224, 224], "scale": 0.00392157, "mean": [0.485, 0.456, 0.406],
//  "std": 0.5, "color": "rgb", "layout": "nchw"}. Values may also be the spec strings
// ("224x224", "0.485:0.456:0.406").
Expected<PreprocessSpec> ParsePreprocessJson(const nlohmann::json& object);

// An 8-bit image, interleaved: pixels[(y * width + x) * channels + c]. channels is
// 1 (gray) or 3 (RGB).
struct Image {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// Pillow-exact BILINEAR resize of an 8-bit image (see the top of this file).
Image ResizeBilinear(const Image& image, int64_t out_height, int64_t out_width);
// The size a resize spec gives an image of this size (unchanged if no resize).
void ResizedSize(const PreprocessSpec& spec, int64_t height, int64_t width, int64_t& out_height, int64_t& out_width);

// Steps 2-5 on a decoded image (already in the spec's color: 1 or 3 channels).
// Errors: a crop larger than the (resized) image, mean/std with a count that is
// neither 1 nor the channel count.
Expected<Tensor> PreprocessImage(const Image& image, const PreprocessSpec& spec);

// scale/mean/std on a non-image sample (any numeric dtype; the result is float32).
// Without those keys the sample is returned unchanged. `channel_axis` is the axis
// per-channel mean/std apply to.
Expected<Tensor> PreprocessTensor(const Tensor& sample, const PreprocessSpec& spec, int64_t channel_axis);
// True if scale/mean/std change values (so PreprocessTensor converts to float32).
bool ChangesValues(const PreprocessSpec& spec);

// Error unless every given key is in `allowed`; `what` describes the data
// ("t10k-images-idx3-ubyte.gz is an idx file").
Status CheckKeysAllowed(const PreprocessSpec& spec, const std::vector<std::string>& allowed, const std::string& what);

}  // namespace seqto::data
