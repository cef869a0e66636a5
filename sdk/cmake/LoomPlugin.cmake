# loom_add_plugin(<name> SOURCES <files...> [LIBRARIES <libs...>])
# Builds <name>.so: a module that links nothing of the core, exports only `loom_plugin_v1`
# (hidden visibility for the rest) and is found by the loader by its file name.
# Used by the in-tree plugins and by third parties after find_package(loom).
#
# Installed with `cmake --install` to <prefix>/${LOOM_PLUGIN_INSTALL_SUBDIR} (default
# lib/loom/plugins: where a loom installed in the same prefix looks). The destination is
# relative, so `--prefix` at install time is honoured.
if(NOT DEFINED LOOM_PLUGIN_INSTALL_SUBDIR)
  set(LOOM_PLUGIN_INSTALL_SUBDIR lib/loom/plugins)
endif()

function(loom_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT TARGET loom::sdk)
    message(FATAL_ERROR "loom_add_plugin(${name}): no loom::sdk target; call find_package(loom)")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES PREFIX "" C_VISIBILITY_PRESET hidden)
  if(DEFINED LOOM_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${LOOM_PLUGIN_OUTPUT_DIR})
  endif()
  target_link_libraries(${name} PRIVATE loom::sdk ${ARG_LIBRARIES})
  install(TARGETS ${name} LIBRARY DESTINATION ${LOOM_PLUGIN_INSTALL_SUBDIR})
endfunction()
