# find_package(loom) for out-of-tree plugins: gives loom::sdk (the ABI headers) and
# loom_add_plugin(). LOOM_PLUGIN_DIR: the plugin directory of this loom installation.
include(${CMAKE_CURRENT_LIST_DIR}/loomTargets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/LoomPlugin.cmake)
get_filename_component(LOOM_PLUGIN_DIR "${CMAKE_CURRENT_LIST_DIR}/../../loom/plugins" ABSOLUTE)
