/* fields.h - reading the fields of a received message in a test without
 * ever crashing on it.
 *
 * An accessor names the key it wants; when the key is missing, or holds a
 * value of another type, the check fails there (file:line and the key, via
 * check.h) and a harmless value comes back: UINT64_MAX, false, "", an empty
 * array or map.  So `CHECK_EQ_U(msg_uint(&m, "lock"), 3)` fails on a reply
 * without "lock" instead of reading garbage, and
 * `map_uint(map_at(msg_array(&m, "held"), 0), "conn")` fails instead of
 * dereferencing NULL when the list is empty.
 *
 *   msg_uint(m, key)           positive integer
 *   msg_bool(m, key)           boolean
 *   msg_str_is(m, key, s, n)   str or bin equal to s[0..n)
 *   msg_bin_is(m, key, s, n)   bin (only) equal to s[0..n)
 *   msg_bytes(m, key)          str or bin as coord_bytes ({"" , 0} if not)
 *   msg_array(m, key)          array (an empty one if not)
 *   msg_map(m, key)            nested map (an empty one if not)
 *   map_at(array, i)           element i of an array, a map (empty if not)
 *   map_*(map, key)            the same on a nested map (map_uint...)
 *
 * What a test may legitimately find absent it asks with msg_has / map_has,
 * which never fail.  msg_ok and msg_code_is are predicates ("is this reply
 * ok / this error?") and never fail either. */
#ifndef COORD_TEST_FIELDS_H
#define COORD_TEST_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "check.h"
#include "msg.h"

/* The accessors behind the macros; file and line are the caller's. */
uint64_t field_uint(const char *file, int line, const msgpack_object_map *map,
                    const char *key);
bool field_bool(const char *file, int line, const msgpack_object_map *map,
                const char *key);
bool field_str_is(const char *file, int line, const msgpack_object_map *map,
                  const char *key, const void *s, size_t n, bool bin_only);
coord_bytes field_bytes(const char *file, int line, const msgpack_object_map *map,
                        const char *key);
const msgpack_object_array *field_array(const char *file, int line,
                                        const msgpack_object_map *map,
                                        const char *key);
const msgpack_object_map *field_map(const char *file, int line,
                                    const msgpack_object_map *map, const char *key);
const msgpack_object_map *field_at(const char *file, int line,
                                   const msgpack_object_array *a, size_t i);

#define map_uint(map, key) field_uint(__FILE__, __LINE__, (map), (key))
#define map_bool(map, key) field_bool(__FILE__, __LINE__, (map), (key))
/* s, n may come from one macro (S("text")): hence the variadic forms */
#define map_str_is(map, key, ...)                                              \
    field_str_is(__FILE__, __LINE__, (map), (key), __VA_ARGS__, false)
#define map_bin_is(map, key, ...)                                              \
    field_str_is(__FILE__, __LINE__, (map), (key), __VA_ARGS__, true)
#define map_bytes(map, key) field_bytes(__FILE__, __LINE__, (map), (key))
#define map_array(map, key) field_array(__FILE__, __LINE__, (map), (key))
#define map_map(map, key) field_map(__FILE__, __LINE__, (map), (key))
#define map_at(array, i) field_at(__FILE__, __LINE__, (array), (i))

#define msg_uint(m, key) map_uint((m)->map, (key))
#define msg_bool(m, key) map_bool((m)->map, (key))
#define msg_str_is(m, key, ...) map_str_is((m)->map, (key), __VA_ARGS__)
#define msg_bin_is(m, key, ...) map_bin_is((m)->map, (key), __VA_ARGS__)
#define msg_bytes(m, key) map_bytes((m)->map, (key))
#define msg_array(m, key) map_array((m)->map, (key))
#define msg_map(m, key) map_map((m)->map, (key))

/* Presence (nil counts as present): never a failure. */
bool map_has(const msgpack_object_map *map, const char *key);
#define msg_has(m, key) map_has((m)->map, (key))

/* Predicates on a reply: {ok: true}; {ok: false, code: code}. */
bool msg_ok(const coord_msg *m);
bool msg_code_is(const coord_msg *m, const char *code);

#endif
