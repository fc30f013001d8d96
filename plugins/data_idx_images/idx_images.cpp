// idx_images: IDX image and label files (MNIST format, plain or gzip) as
// sequences of pixel tokens in row-major order, optionally average-pooled and
// quantised to fewer grey levels. Defaults read Fashion-MNIST from
// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <growformer/config.hpp>
#include <growformer/data/io.hpp>
#include <growformer/data/split.hpp>
#include <growformer/dataset.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>
#include <growformer/rng.hpp>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string kDir = "/usr/share/datasets/fashion-mnist/";

/// The options of `idx_images`, each declared once: its own, and `val_ratio` and `split_seed`
/// (the seed of the val split and subsets, `seed`) of the data library's split options.
struct Settings : gf::SplitSettings {
  std::string train_images, train_labels, test_images, test_labels;
  int levels = 256, downsample = 1;
  int64_t max_train = 0, max_test = 0;
  std::vector<std::string> class_names;

  static const gf::OptionTable<Settings>& table() {
    using S = Settings;
    static const auto split = gf::SplitSettings::table("the (max_train-capped) training images",
                                                       "the val split and subsets");
    static const auto t =
        gf::OptionTable<S>()
            .add("train_images", &S::train_images, kDir + "train-images-idx3-ubyte.gz",
                 "IDX images of the training split (plain or gzip)")
            .add("train_labels", &S::train_labels, kDir + "train-labels-idx1-ubyte.gz",
                 "IDX labels of the training split")
            .add("test_images", &S::test_images, kDir + "t10k-images-idx3-ubyte.gz",
                 "IDX images of the test split")
            .add("test_labels", &S::test_labels, kDir + "t10k-labels-idx1-ubyte.gz",
                 "IDX labels of the test split")
            .include(split, {"val_ratio"})
            .add("levels", &S::levels, "256", "grey levels: token = 1 + pixel * levels / 256", 2,
                 256)
            .add("downsample", &S::downsample, "1",
                 "average-pool f x f blocks (28x28 -> 14x14 for 2)", 1)
            .add("max_train", &S::max_train, "0",
                 "use a seeded random subset of this many training images, val included (0 = all)",
                 0)
            .add("max_test", &S::max_test, "0",
                 "keep a seeded random subset of the test split (0 = all)", 0)
            .add("class_names", &S::class_names, "[]", "names of the classes by label")
            .include(split, {"split_seed"});
    return t;
  }
};

// An IDX file of unsigned bytes: dims and the data after the header.
struct Idx {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> bytes;
  size_t offset = 0;  // first data byte
};

Idx read_idx(const std::string& path, uint8_t want_ndim) {
  Idx idx;
  idx.bytes = gf::read_file_bytes(path);
  const auto& b = idx.bytes;
  uint32_t want_magic = 0x0800u | want_ndim;
  char what[96];
  std::snprintf(what, sizeof what, "expected 0x%08x (unsigned bytes, %u dimension%s: %s)",
                want_magic, unsigned(want_ndim), want_ndim == 1 ? "" : "s",
                want_ndim == 1 ? "labels" : "images");
  if (b.size() < 4)
    gf::data_error(path, 0, "too short for an IDX file (" + std::to_string(b.size()) + " bytes)");
  uint32_t magic = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
  if (magic != want_magic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "wrong IDX magic number 0x%08x; ", magic);
    gf::data_error(path, 0, std::string(buf) + what);
  }
  size_t header = 4 + 4 * size_t{want_ndim};
  if (b.size() < header) gf::data_error(path, 0, "IDX header truncated");
  size_t total = 1;
  for (size_t i = 0; i < want_ndim; ++i) {
    const uint8_t* p = b.data() + 4 + 4 * i;
    uint32_t d = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
    idx.dims.push_back(d);
    // checked product: dimensions whose product exceeds the file can never match it
    if (d != 0 && total > (b.size() - header) / d) {
      gf::data_error(
          path, 0,
          "IDX size mismatch: the header promises more data than the file holds (dimension " +
              std::to_string(i + 1) + " is " + std::to_string(d) + ", the file has " +
              std::to_string(b.size() - header) + " data bytes; truncated or corrupt)");
    }
    total *= d;
  }
  if (b.size() != header + total) {
    gf::data_error(path, 0,
                   "IDX size mismatch: the header promises " + std::to_string(total) +
                       " data bytes, the file holds " + std::to_string(b.size() - header) +
                       " (truncated or corrupt)");
  }
  idx.offset = header;
  return idx;
}

class IdxImages : public gf::Dataset {
 public:
  explicit IdxImages(Settings s) : s_(std::move(s)) {}

  std::string describe() const override {
    std::ostringstream os;
    os << "idx_images(train=" << s_.train_images << ", test=" << s_.test_images
       << ", levels=" << s_.levels << ", downsample=" << s_.downsample << ")";
    return os.str();
  }

  gf::DataSplits load() override {
    gf::DataSplits d;
    d.pad_id = 0;
    d.vocab_size = static_cast<size_t>(s_.levels) + 1;
    d.vocab.push_back("<pad>");
    for (int l = 0; l < s_.levels; ++l) d.vocab.push_back(std::to_string(l));
    std::vector<gf::Example> train = read_pair(s_.train_images, s_.train_labels, d);
    std::vector<gf::Example> test = read_pair(s_.test_images, s_.test_labels, d);

    gf::Rng rng(s_.seed, "idx_images.split");
    gf::seeded_shuffle(train, rng);
    // max_train caps the training images used before val is carved out of them, so val_ratio
    // stays a share of what is used (6000 images at 0.1 -> 5400 train / 600 val, not a
    // 6000-image val set beside 6000 train images).
    if (s_.max_train > 0 && train.size() > static_cast<size_t>(s_.max_train)) {
      train.resize(static_cast<size_t>(s_.max_train));  // already a seeded random order
    }
    size_t n_val = gf::ratio_count(train.size(), s_.val_ratio);
    d.val.assign(std::make_move_iterator(train.end() - static_cast<long>(n_val)),
                 std::make_move_iterator(train.end()));
    train.resize(train.size() - n_val);
    if (s_.max_test > 0 && test.size() > static_cast<size_t>(s_.max_test)) {
      gf::Rng trng(s_.seed, "idx_images.test_subset");
      gf::seeded_shuffle(test, trng);
      test.resize(static_cast<size_t>(s_.max_test));
    }
    d.train = std::move(train);
    d.test = std::move(test);
    gf::require_nonempty_splits(d, "idx_images", "check val_ratio, max_train and max_test");
    if (!s_.class_names.empty()) {
      if (s_.class_names.size() < d.num_classes) {
        throw gf::ConfigError("idx_images: class_names lists " +
                              std::to_string(s_.class_names.size()) +
                              " names but the labels go "
                              "up to " +
                              std::to_string(d.num_classes - 1));
      }
      d.num_classes = s_.class_names.size();
      d.class_names = s_.class_names;
    } else {
      for (size_t c = 0; c < d.num_classes; ++c) d.class_names.push_back(std::to_string(c));
    }
    return d;
  }

 private:
  Settings s_;

  std::vector<gf::Example> read_pair(const std::string& images_path, const std::string& labels_path,
                                     gf::DataSplits& d) {
    Idx images = read_idx(images_path, 3);
    Idx labels = read_idx(labels_path, 1);
    size_t n = images.dims[0], rows = images.dims[1], cols = images.dims[2];
    if (labels.dims[0] != n) {
      throw gf::ConfigError(images_path + " holds " + std::to_string(n) + " images but " +
                            labels_path + " holds " + std::to_string(labels.dims[0]) + " labels");
    }
    size_t f = static_cast<size_t>(s_.downsample);
    if (f > rows || f > cols) {
      throw gf::ConfigError("idx_images: downsample " + std::to_string(f) + " exceeds the " +
                            std::to_string(rows) + "x" + std::to_string(cols) + " images of " +
                            images_path);
    }
    size_t out_r = rows / f, out_c = cols / f;  // a ragged edge is cut off
    std::vector<gf::Example> out(n);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* img = images.bytes.data() + images.offset + i * rows * cols;
      gf::Example& e = out[i];
      e.label = labels.bytes[labels.offset + i];
      d.num_classes = std::max(d.num_classes, static_cast<size_t>(e.label) + 1);
      e.tokens.resize(out_r * out_c);
      for (size_t r = 0; r < out_r; ++r) {
        for (size_t c = 0; c < out_c; ++c) {
          unsigned sum = 0;
          for (size_t dr = 0; dr < f; ++dr) {
            for (size_t dc = 0; dc < f; ++dc) sum += img[(r * f + dr) * cols + c * f + dc];
          }
          unsigned v = (sum + static_cast<unsigned>(f * f) / 2) / static_cast<unsigned>(f * f);
          unsigned q = v * static_cast<unsigned>(s_.levels) / 256;
          e.tokens[r * out_c + c] = static_cast<int32_t>(q) + 1;
        }
      }
    }
    d.max_len = std::max(d.max_len, out_r * out_c);
    return out;
  }
};

std::unique_ptr<gf::Dataset> make(const gf::Options& o, const gf::DatasetBuild& b) {
  Settings s;
  s.seed = b.seed;  // unless split_seed is given
  s = Settings::table().read(o, std::move(s));
  for (std::string* path : {&s.train_images, &s.train_labels, &s.test_images, &s.test_labels})
    *path = o.resolve_path(*path);
  return std::make_unique<IdxImages>(std::move(s));
}

// ---- images given in memory ---------------------------------------------------------------
// An IDX file of unsigned bytes: magic 0x0801 (labels) or 0x0803 (images), the dimensions as
// big-endian uint32, then the bytes.
void write_idx(const std::string& path, const std::vector<uint32_t>& dims, const uint8_t* bytes,
               size_t size) {
  std::ofstream f(path, std::ios::binary);
  const char head[4] = {0, 0, 8, static_cast<char>(dims.size())};
  f.write(head, 4);
  for (uint32_t d : dims) {
    const char be[4] = {static_cast<char>(d >> 24), static_cast<char>(d >> 16),
                        static_cast<char>(d >> 8), static_cast<char>(d)};
    f.write(be, 4);
  }
  f.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  if (!f) throw gf::RuntimeError(path + ": cannot write the images given in memory");
}

// Images given in memory are written as IDX files; an IDX label is one byte, so labels are ints
// 0..255 (class_names names the classes). Images to evaluate or predict on are the test split,
// beside a stand-in training split of two blank images (the dataset reads one and carves val
// from it).
class ImageFormats : public gf::DataFormats {
 public:
  std::vector<std::string> kinds() const override { return {"images"}; }
  std::vector<std::string> default_for() const override { return {"images"}; }
  std::vector<std::string> file_options() const override {
    return {"train_images", "train_labels", "test_images", "test_labels"};
  }

  void check_split(const gf::MemoryData& data, const gf::MemorySplit& split,
                   const std::string& where) const override {
    for (size_t i = 0; i < split.labels.size(); ++i) {
      const std::string& y = split.labels[i];
      const bool ok = data.int_labels && y.size() <= 3 && y.find('-') == std::string::npos &&
                      std::stoi(y) <= 255;
      if (!ok)
        throw gf::ConfigError(where + "[1][" + std::to_string(i) +
                              "]: the label of an image is an int 0..255 (IDX labels), not " +
                              (data.int_labels ? y : "'" + y.substr(0, 38) + "'") +
                              "; name the classes with data.class_names");
    }
  }

  gf::StagedData stage(const gf::MemoryData& data, const gf::ConfigNode& section,
                       const std::string& folder, gf::StagePurpose purpose) const override {
    (void)section;
    if (data.kind != "images") throw gf::ConfigError("idx_images reads images");
    gf::StagedData out;
    if (purpose != gf::StagePurpose::train) {
      stage_test(data.splits.at(0), folder, purpose == gf::StagePurpose::predict, out);
      return out;
    }
    bool has_test = false;
    for (const gf::MemorySplit& s : data.splits) {
      if (s.name == "val")
        throw gf::ConfigError(
            "data['val']: idx_images carves the validation images from the training images "
            "(data.val_ratio); give 'train' and 'test'");
      has_test = has_test || s.name == "test";
    }
    if (!has_test)
      throw gf::ConfigError(
          "data: idx_images reads a test split of images: give {'train': (images, labels), "
          "'test': (images, labels)} (val is carved from train by data.val_ratio)");
    for (const gf::MemorySplit& s : data.splits)
      write_split(s, folder, s.name + "-images-idx3-ubyte", s.name + "-labels-idx1-ubyte",
                  labels_of(s), out);
    return out;
  }

 private:
  static std::vector<uint8_t> labels_of(const gf::MemorySplit& s) {
    std::vector<uint8_t> out;
    for (const std::string& y : s.labels) out.push_back(static_cast<uint8_t>(std::stoi(y)));
    return out;
  }
  static void write_split(const gf::MemorySplit& s, const std::string& folder,
                          const std::string& images, const std::string& labels,
                          const std::vector<uint8_t>& ys, gf::StagedData& out) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    write_idx(folder + "/" + images, {n, uint32_t(s.height), uint32_t(s.width)}, s.pixels.data(),
              s.pixels.size());
    write_idx(folder + "/" + labels, {n}, ys.data(), ys.size());
    out.files.push_back({s.name + "_images", images, s.name, false});
    out.files.push_back({s.name + "_labels", labels, s.name, false});
  }
  static void stage_test(const gf::MemorySplit& test, const std::string& folder, bool unlabelled,
                         gf::StagedData& out) {
    std::vector<uint8_t> ys = unlabelled ? std::vector<uint8_t>(test.size(), 0) : labels_of(test);
    gf::MemorySplit t = test;
    t.name = "test";
    write_split(t, folder, "test-images.idx", "test-labels.idx", ys, out);
    gf::MemorySplit blank;
    blank.name = "train";
    blank.height = test.height;
    blank.width = test.width;
    blank.pixels.assign(2 * test.height * test.width, 0);
    write_split(blank, folder, "train-images.idx", "train-labels.idx", {0, 0}, out);
    out.options = {{"val_ratio", "0.5"}, {"max_train", "0"}, {"max_test", "0"}};
  }
};

void register_components(gf::Registry& r) {
  r.add_dataset({"idx_images", "IDX images (Fashion-MNIST) as row-major pixel-token sequences",
                 Settings::table().specs()},
                make, std::make_shared<ImageFormats>());
}

}  // namespace

GROWFORMER_PLUGIN("idx_images", "0.1.0", register_components)
