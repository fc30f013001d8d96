// Private to the config sources: the parsed document and the node handle's state, shared by
// config_document.cpp (reading and checking YAML), config_node.cpp (the node API) and the
// helpers below.
#pragma once

#include <yaml-cpp/yaml.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "growformer/config.hpp"

namespace gf {
namespace config_detail {

struct Doc {
  std::string file;  // path or "<string>"
  std::string base_dir;
  YAML::Node root;
  std::set<std::string> consumed;    // paths consumed with everything below
  std::set<std::string> overridden;  // paths set with --set
};

/// PATH.KEY (KEY alone at the top).
std::string join(const std::string& path, const std::string& key);
/// "a, b, c".
std::string join_list(const std::vector<std::string>& xs);
/// FILE:LINE:COLUMN of a mark (FILE alone when the mark is null).
std::string mark_str(const Doc& doc, const YAML::Mark& m);

}  // namespace config_detail

struct ConfigNode::Impl {
  std::shared_ptr<config_detail::Doc> doc;
  YAML::Node node;  // may be invalid/undefined
  bool present = false;
  std::string path;
};

}  // namespace gf
