// The `syncopate` command-line tool. Subcommands set their own callbacks; errors thrown by the
// library are turned into messages and exit codes here, never into a crash.
#include <cstdio>
#include <exception>

#include <fmt/core.h>

#include "commands.hpp"
#include "syncopate/common/error.hpp"

int main(int argc, char** argv) {
  using namespace syncopate::cli;
  CLI::App app{"syncopate: compute-communication overlap inside one fused multi-GPU kernel"};
  app.require_subcommand(1);
  register_plan_commands(app);
  register_lower_commands(app);
  register_simulate_commands(app);
  register_transform_commands(app);
  register_demo_commands(app);
  register_import_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const syncopate::UserError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitInvalid;
  } catch (const syncopate::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitInternal;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return kExitInternal;
  }
  return kExitOk;
}
