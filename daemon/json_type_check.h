#pragma once

// The JSON type of each value in a request body, checked against the proto
// field it sets. protobuf 3.21's JSON parser is lenient: it decodes the
// strings "true", "1" and "yes" for a bool, "5" for a uint32, "0.5" for a
// double. A client that sends a string where the schema says bool or number
// has a bug (or is probing where two parsers disagree), so kboxd refuses it,
// naming the field, instead of guessing. What each proto type takes:
//
//   bool                          true / false
//   int32, uint32 (all 32-bit)    a number
//   int64, uint64 (all 64-bit)    a number or a string of digits (a JSON
//                                 number past 2^53 loses precision in most
//                                 clients, so the mapping prints these as
//                                 strings and they must decode)
//   float, double                 a number, or "NaN", "Infinity", "-Infinity"
//   enum                          a value name or a number (the mapping allows both)
//   string, bytes                 a string
//   message, map                  an object; repeated: an array
//   any field                     null (the mapping's "absent")
//
// Well-known types with their own JSON form (Timestamp, Duration, Struct,
// Value, Any, FieldMask) are left to the parser; the wrappers (BoolValue,
// UInt32Value, ...) take what their wrapped type takes.

#include <string>

#include <boost/system/result.hpp>
#include <google/protobuf/descriptor.h>

#include "policy/field_error.h"

namespace kbox {

// Checks `body`, a JSON text protobuf's parser has already accepted as a
// `type`, against the table above. The error names the first offending field
// by its proto path ("fresh_reference_timing", "jobs[0].request.seed",
// "anticheat_overrides[rule]"). A body that does not parse as JSON at all is
// refused with field "body" (the caller parses first, so that means the two
// parses disagree, and refusing is the safe side).
boost::system::result<void, FieldError> CheckJsonTypes(const std::string& body,
                                                       const google::protobuf::Descriptor& type);

}  // namespace kbox
