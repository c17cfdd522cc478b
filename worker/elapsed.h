#pragma once

// Milliseconds between steady-clock points: how every duration kbox reports
// (a result's durations, a stage's phases) is measured.

#include <chrono>

namespace kbox {

inline double MsBetween(std::chrono::steady_clock::time_point from,
                        std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

inline double MsSince(std::chrono::steady_clock::time_point from) {
  return MsBetween(from, std::chrono::steady_clock::now());
}

}  // namespace kbox
