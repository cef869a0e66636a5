# find_package(loom) for out-of-tree plugins: gives loom::sdk and loom_add_plugin().
include(${CMAKE_CURRENT_LIST_DIR}/loomTargets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/LoomPlugin.cmake)
