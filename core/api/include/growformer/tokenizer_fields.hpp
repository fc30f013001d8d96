// A dataset's saved tokenizer (DataSplits::tokenizer) declared once: each field's JSON key and
// the member of the plugin's settings it is written from and read back into, so that the text a
// checkpoint keeps and the settings a restored dataset tokenises with cannot drift apart.
//
//   static const gf::TokenizerFields<Settings>& saved() {
//     static const auto t = gf::TokenizerFields<Settings>("my_data")
//                               .add("lowercase", &Settings::lowercase)
//                               .add("vocab", &Settings::vocab, [](const Settings& s) {
//                                 return s.tokenizer == "word"; });
//     return t;
//   }
//   d.tokenizer = saved().save(settings);   // in load()
//   saved().load(build.tokenizer, settings); // in the factory, given a checkpoint's tokenizer
//
// Strings are bytes, written losslessly (json_text.hpp). Header-only; needs nlohmann-json.
#pragma once
#include "growformer/export.hpp"

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"
#include "growformer/json_text.hpp"

GROWFORMER_API_BEGIN

namespace gf {

template <class T>
class TokenizerFields {
 public:
  /// Whether a field is saved (and read back) for the settings at hand; null: always.
  using When = std::function<bool(const T&)>;

  /// The fields of dataset PLUGIN's tokenizer; the text names the plugin, and a text of another
  /// plugin is refused.
  explicit TokenizerFields(std::string plugin) : plugin_(std::move(plugin)) {}

  /// The field KEY: T::*member (a member T may inherit from B) as JSON (any type nlohmann
  /// converts), when WHEN holds.
  template <class V, class B>
  TokenizerFields& add(std::string key, V B::*member, When when = nullptr) {
    static_assert(std::is_base_of_v<B, T>, "add: the member belongs to no base of the settings");
    return custom(
        std::move(key), [member](const T& t) { return nlohmann::json(t.*member); },
        [member](const nlohmann::json& j, T& t) { t.*member = j.get<V>(); }, std::move(when));
  }
  /// A field written and read by hand (a member of another type in the text, several members).
  TokenizerFields& custom(std::string key, std::function<nlohmann::json(const T&)> save,
                          std::function<void(const nlohmann::json&, T&)> load,
                          When when = nullptr) {
    fields_.push_back({std::move(key), std::move(save), std::move(load), std::move(when)});
    return *this;
  }

  /// The saved tokenizer of T: {"plugin": PLUGIN, KEY: value, ...} as dump_json text.
  std::string save(const T& t) const {
    nlohmann::json j = {{"plugin", plugin_}};
    for (const auto& f : fields_)
      if (!f.when || f.when(t)) j[f.key] = f.save(t);
    return dump_json(j);
  }
  /// Reads TEXT (save()'s) into T, the fields in the order added (a field's WHEN sees the fields
  /// read before it). ConfigError naming the plugin when TEXT is another plugin's or corrupt.
  void load(const std::string& text, T& t) const {
    nlohmann::json j;
    try {
      j = json_bytes_tree(nlohmann::json::parse(text));
      if (j.value("plugin", "") != plugin_)
        throw ConfigError(plugin_ + ": the checkpoint's tokenizer belongs to dataset `" +
                          j.value("plugin", std::string("?")) + "`, not " + plugin_);
      for (const auto& f : fields_)
        if (!f.when || f.when(t)) f.load(j.at(f.key), t);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(plugin_ + ": corrupt saved tokenizer: " + e.what());
    }
  }

 private:
  struct Field {
    std::string key;
    std::function<nlohmann::json(const T&)> save;
    std::function<void(const nlohmann::json&, T&)> load;
    When when;
  };
  std::string plugin_;
  std::vector<Field> fields_;
};

}  // namespace gf

GROWFORMER_API_END
