# growformer_add_plugin(NAME [DATA] [INCRT] SOURCES src... [LIBRARIES lib...]) builds one plugin
# library (a MODULE) that the registry finds on its search path; DATA links the data-set
# library growformer_data (readers, FASTA/k-mers, ListOps), INCRT the INCRT maths
# growformer_incrt (<growformer/incrt/...>). Works in the source tree and,
# through find_package(growformer), out of tree.
function(growformer_add_plugin name)
  cmake_parse_arguments(ARG "DATA;INCRT" "" "SOURCES;LIBRARIES" ${ARGN})
  add_library(${name} MODULE ${ARG_SOURCES})
  if(TARGET growformer_core)
    set(_ns "")
  else()
    set(_ns "growformer::")
  endif()
  target_link_libraries(${name} PRIVATE ${_ns}growformer_core ${ARG_LIBRARIES})
  if(ARG_INCRT)
    target_link_libraries(${name} PRIVATE ${_ns}growformer_incrt)
  endif()
  if(ARG_DATA)
    target_link_libraries(${name} PRIVATE ${_ns}growformer_data)
    # installed plugins sit in <libdir>/growformer/plugins, the data library in <libdir>
    set_target_properties(${name} PROPERTIES INSTALL_RPATH "$ORIGIN/../..")
  endif()
  # the loader picks up files named libgf_*.so
  string(REGEX REPLACE "^gf_" "" _stem "${name}")
  set_target_properties(${name} PROPERTIES PREFIX "lib" OUTPUT_NAME "gf_${_stem}"
                                           CXX_VISIBILITY_PRESET hidden
                                           CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_compile_options(${name} PRIVATE -Wno-missing-field-initializers)
  if(DEFINED GROWFORMER_BUILD_PLUGIN_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${GROWFORMER_BUILD_PLUGIN_DIR})
    set(GROWFORMER_PLUGIN_TARGETS "${GROWFORMER_PLUGIN_TARGETS};${name}" CACHE INTERNAL "")
  endif()
  if(DEFINED GROWFORMER_PLUGIN_INSTALL_DIR)
    install(TARGETS ${name} LIBRARY DESTINATION ${GROWFORMER_PLUGIN_INSTALL_DIR})
  endif()
endfunction()

# growformer_simd_sources(AVX2 src... AVX512 src...) compiles kernel sources with the flags of
# their instruction set, the ones the core's own kernels use (core/numeric/src/simd/): AVX2 with FMA,
# and AVX-512F+DQ. SSE2 sources need none (the x86-64 baseline). Such a source must only run
# once the program chose its set (gf::kernels::active_isa(), capped by GROWFORMER_ISA). Call it
# in the folder whose target compiles the sources.
function(growformer_simd_sources)
  cmake_parse_arguments(ARG "" "" "AVX2;AVX512" ${ARGN})
  if(ARG_AVX2)
    set_source_files_properties(${ARG_AVX2} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma")
  endif()
  if(ARG_AVX512)
    set_source_files_properties(${ARG_AVX512} PROPERTIES
                                COMPILE_OPTIONS "-mavx512f;-mavx512dq;-mavx2;-mfma;-Wno-maybe-uninitialized")
  endif()
endfunction()
