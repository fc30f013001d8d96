// The check of a plugin file's bytes before dlopen: a truncated or foreign file can crash the
// loader itself, so its ELF headers, segments, sections and entry point are read first.
#include "growformer/registry.hpp"

#include <boost/dll/shared_library.hpp>

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <any>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "growformer/plugin.hpp"
#include "registry_impl.hpp"

namespace gf {

namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
constexpr uint16_t kHostMachine = 0;  // not checked
#endif

// [off, off + n) lies inside a file of `size` bytes (no overflow).
bool inside(uint64_t off, uint64_t n, size_t size) { return off <= size && n <= size - off; }

template <class T>
T read_at(const uint8_t* bytes, uint64_t off) {
  T v;
  std::memcpy(&v, bytes + off, sizeof v);
  return v;
}

}  // namespace

std::string Registry::check_library_image(const uint8_t* bytes, size_t size) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(bytes, ELFMAG, SELFMAG) != 0)
    return "not an ELF shared library (" + std::to_string(size) + " bytes, no ELF header)";
  auto eh = read_at<Elf64_Ehdr>(bytes, 0);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return "not a 64-bit ELF library";
  if (eh.e_ident[EI_DATA] !=
      (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB))
    return "ELF byte order differs from this machine's";
  if (eh.e_type != ET_DYN)
    return "an ELF file but not a shared library (e_type " + std::to_string(eh.e_type) + ")";
  if (kHostMachine != 0 && eh.e_machine != kHostMachine)
    return "built for another processor (ELF machine " + std::to_string(eh.e_machine) + ")";
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
      !inside(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), size))
    return "program headers lie outside the file (truncated?)";
  bool dynamic = false;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    auto ph = read_at<Elf64_Phdr>(bytes, eh.e_phoff + i * sizeof(Elf64_Phdr));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (!inside(ph.p_offset, ph.p_filesz, size))
      return "segment " + std::to_string(i) + " ends at byte " +
             std::to_string(ph.p_offset + ph.p_filesz) + " but the file has " +
             std::to_string(size) + " (truncated?)";
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
      return "segment " + std::to_string(i) + " is larger in the file than in memory";
    dynamic = dynamic || ph.p_type == PT_DYNAMIC;
  }
  if (!dynamic) return "no dynamic segment (not a shared library)";
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
      !inside(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), size))
    return "section headers lie outside the file (truncated?)";
  auto section = [&](uint64_t i) {
    return read_at<Elf64_Shdr>(bytes, eh.e_shoff + i * sizeof(Elf64_Shdr));
  };
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    auto sh = section(i);
    if (sh.sh_type != SHT_NOBITS && !inside(sh.sh_offset, sh.sh_size, size))
      return "section " + std::to_string(i) + " lies outside the file (truncated?)";
  }
  // the entry point: a defined function in the dynamic symbol table
  for (uint64_t i = 0; i < eh.e_shnum; ++i) {
    auto sh = section(i);
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum)
      return "malformed dynamic symbol table";
    auto str = section(sh.sh_link);
    if (str.sh_type != SHT_STRTAB) return "malformed dynamic symbol table";
    const char* want = GROWFORMER_ENTRY_POINT_NAME;
    size_t want_len = std::strlen(want);
    for (uint64_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      auto sym = read_at<Elf64_Sym>(bytes, sh.sh_offset + k * sizeof(Elf64_Sym));
      if (sym.st_name >= str.sh_size || str.sh_size - sym.st_name <= want_len) continue;
      const uint8_t* name = bytes + str.sh_offset + sym.st_name;
      if (std::memcmp(name, want, want_len + 1) != 0) continue;
      if (sym.st_shndx == SHN_UNDEF) continue;
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC)
        return std::string("the entry point `") + want +
               "` is not a function (declare it with "
               "GROWFORMER_PLUGIN(...))";
      return "";
    }
  }
  return "not a growformer plugin: no `" GROWFORMER_ENTRY_POINT_NAME
         "` entry point (declare one with GROWFORMER_PLUGIN(...))";
}

}  // namespace gf
