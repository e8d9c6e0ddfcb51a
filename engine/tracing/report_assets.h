#pragma once
// The trace explorer's page, CSS and script (engine/tracing/report/), inlined into the library at
// build time by cmake/embed_text.cmake: the files stay ordinary HTML, CSS and JavaScript.
namespace vkattn::report_assets {

extern const char* const page_html;  // holds the markers /*vkattn:css*/, /*vkattn:js*/, /*vkattn:data*/
extern const char* const page_css;
extern const char* const page_js;

}  // namespace vkattn::report_assets
