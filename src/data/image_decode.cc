#include "data/image_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace seqto::data {

namespace {

// Pillow's RGB -> L (Convert.c, rgb2l): ITU-R 601-2 luma in 16-bit fixed point.
inline uint8_t Luma(uint8_t r, uint8_t g, uint8_t b) {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

Image RgbToGray(const Image& rgb) {
  Image g;
  g.width = rgb.width;
  g.height = rgb.height;
  g.channels = 1;
  g.pixels.resize(static_cast<size_t>(rgb.width * rgb.height));
  for (size_t i = 0; i < g.pixels.size(); ++i)
    g.pixels[i] = Luma(rgb.pixels[3 * i], rgb.pixels[3 * i + 1], rgb.pixels[3 * i + 2]);
  return g;
}

Image GrayToRgb(const Image& gray) {
  Image c;
  c.width = gray.width;
  c.height = gray.height;
  c.channels = 3;
  c.pixels.resize(gray.pixels.size() * 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i)
    c.pixels[3 * i] = c.pixels[3 * i + 1] = c.pixels[3 * i + 2] = gray.pixels[i];
  return c;
}

std::string SizeCheck(int64_t width, int64_t height) {
  if (width <= 0 || height <= 0)
    return "image has no pixels (" + std::to_string(width) + "x" + std::to_string(height) + ")";
  if (width > kMaxImageSide || height > kMaxImageSide || width * height > kMaxImagePixels)
    return "image too large (" + std::to_string(width) + "x" + std::to_string(height) + ", at most " +
           std::to_string(kMaxImageSide) + " per side and " + std::to_string(kMaxImagePixels >> 20) + " Mpixels)";
  return "";
}

// ---------------------------------------------------------------- PNG

struct PngContext {
  const unsigned char* data = nullptr;
  size_t size = 0, pos = 0;
  char message[256] = {0};
};

void PngError(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof(ctx->message), "%s", msg);
  png_longjmp(png, 1);
}
void PngWarning(png_structp, png_const_charp) {}  // ancillary problems are not fatal

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (ctx->size - ctx->pos < n) {
    std::snprintf(ctx->message, sizeof(ctx->message), "truncated: the file ends at byte %zu", ctx->size);
    png_longjmp(png, 1);
  }
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

// Decodes into `out` (allocated here, owned by the caller so that a longjmp skips no
// destructor). Returns an empty string or the error.
std::string DecodePngRaw(const std::string& bytes, Image* out, std::vector<png_bytep>* rows) {
  PngContext ctx;
  ctx.data = reinterpret_cast<const unsigned char*>(bytes.data());
  ctx.size = bytes.size();
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, PngError, PngWarning);
  if (!png) return "out of memory";
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return "out of memory";
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return std::string("corrupt PNG: ") + ctx.message;
  }
  png_set_read_fn(png, &ctx, PngRead);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  {  // no std::string may live across a libpng call (a longjmp would skip its destructor)
    std::string size_error = SizeCheck(width, height);
    if (!size_error.empty()) {
      png_destroy_read_struct(&png, &info, nullptr);
      return size_error;
    }
  }
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  // Alpha (a channel, or tRNS expanded by the calls above) is dropped, as Pillow's
  // convert("RGB") / convert("L") do.
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  if (channels != 1 && channels != 3) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "unsupported PNG pixel format (" + std::to_string(channels) + " channels after conversion)";
  }
  out->width = width;
  out->height = height;
  out->channels = channels;
  out->pixels.resize(static_cast<size_t>(width) * height * channels);
  rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*rows)[y] = out->pixels.data() + static_cast<size_t>(y) * width * channels;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);  // checks the rest of the file (a truncated IEND is an error)
  png_destroy_read_struct(&png, &info, nullptr);
  return "";
}

// ---------------------------------------------------------------- JPEG

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64] = {0};
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  char buf[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, buf);
  std::snprintf(err->message, sizeof(err->message), "%s", buf);
  longjmp(err->jump, 1);
}

// Warnings about corrupt data are errors: libjpeg would otherwise fill the missing
// part of a truncated file with gray and carry on. Harmless ones are ignored.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level != -1) return;  // trace messages
  const int code = cinfo->err->msg_code;
  if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM) return;
  JpegErrorExit(cinfo);
}

void JpegOutputMessage(j_common_ptr) {}

std::string DecodeJpegRaw(const std::string& bytes, int channels, Image* out, std::vector<JSAMPROW>* rows) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  err.mgr.emit_message = JpegEmitMessage;
  err.mgr.output_message = JpegOutputMessage;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return std::string("corrupt JPEG: ") + err.message;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  {  // no std::string may live across a libjpeg call (a longjmp would skip its destructor)
    std::string size_error = SizeCheck(cinfo.image_width, cinfo.image_height);
    if (!size_error.empty()) {
      jpeg_destroy_decompress(&cinfo);
      return size_error;
    }
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return "CMYK JPEG images are not supported (convert it to RGB)";
  }
  // Gray files decode to gray, everything else to RGB; a gray output of a color
  // file is computed afterwards with Pillow's formula (libjpeg would return Y).
  const bool gray_file = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = (gray_file && channels != 3) ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out->width = cinfo.output_width;
  out->height = cinfo.output_height;
  out->channels = cinfo.output_components;
  out->pixels.resize(static_cast<size_t>(out->width * out->height * out->channels));
  rows->resize(1);
  while (cinfo.output_scanline < cinfo.output_height) {
    (*rows)[0] = out->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out->width * out->channels;
    jpeg_read_scanlines(&cinfo, rows->data(), 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return "";
}

bool IsPng(const std::string& b) { return b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0; }
bool IsJpeg(const std::string& b) { return b.size() >= 3 && std::memcmp(b.data(), "\xff\xd8\xff", 3) == 0; }

}  // namespace

bool LooksLikeImage(const std::string& bytes) { return IsPng(bytes) || IsJpeg(bytes); }

int ChannelsFor(ColorMode color) {
  switch (color) {
    case ColorMode::kGray:
      return 1;
    case ColorMode::kRgb:
    case ColorMode::kBgr:
      return 3;
    default:
      return 0;
  }
}

Expected<Image> DecodeImage(const std::string& bytes, int channels, const std::string& name) {
  Image image;
  std::string error;
  if (IsPng(bytes)) {
    std::vector<png_bytep> rows;
    error = DecodePngRaw(bytes, &image, &rows);
  } else if (IsJpeg(bytes)) {
    std::vector<JSAMPROW> rows;
    error = DecodeJpegRaw(bytes, channels, &image, &rows);
  } else {
    error = bytes.empty() ? "empty file" : "not a PNG or JPEG image (unknown magic bytes)";
  }
  if (!error.empty()) return UserError(name + ": " + error);
  if (channels == 1 && image.channels == 3) return RgbToGray(image);
  if (channels == 3 && image.channels == 1) return GrayToRgb(image);
  return image;
}

Expected<Image> ReadImageFile(const std::string& path, int channels) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return UserError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) return UserError(path + ": not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return UserError(path + ": " + ec.message());
  if (size > (uintmax_t{1} << 31))
    return UserError(path + ": image file too large (" + std::to_string(size) + " bytes)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return UserError(path + ": cannot open file");
  std::string bytes(size, '\0');
  if (size && !in.read(bytes.data(), static_cast<std::streamsize>(size))) return UserError(path + ": cannot read file");
  return DecodeImage(bytes, channels, path);
}

}  // namespace seqto::data
