# gf_data_fasta_variants's sources, named once: the plugin (CMakeLists.txt here) and its libFuzzer harness
# (fuzz/CMakeLists.txt) both read this list, so a file added here is built into both
set(GF_FASTA_VARIANTS_SOURCES ${CMAKE_CURRENT_LIST_DIR}/fasta_variants.cpp)
