// SPDX-License-Identifier: Apache-2.0
// The yearly average intensity by country: the table, lookups, and inferring the country from the timezone
// and the locale (with fake files, so the machine's own settings never matter).
#include "joule/carbon/country.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/carbon/signal.hpp"

#include "test_util.hpp"

namespace joule::carbon {
namespace {

// Sources that tell nothing: no TZ, no localtime link, no timezone file, no locale.
LocaleSources country_test_blank(const test::TempDir& dir) {
  LocaleSources sources;
  sources.localtime_path = dir.path() + "/no-localtime";
  sources.timezone_file = dir.path() + "/no-timezone";
  sources.zone_tab = dir.path() + "/no-zone.tab";
  return sources;
}

TEST(CountryTable, ShippedTableHasEveryCountryOnce) {
  const auto& table = CountryTable::builtin();
  EXPECT_EQ(table.countries().size(), 213u);
  EXPECT_EQ(table.source(), "data/carbon/country_intensity.csv");
  const auto germany = table.find("DEU");
  ASSERT_TRUE(germany) << germany.error().message();
  EXPECT_EQ(germany->name, "Germany");
  EXPECT_GT(germany->intensity_g_per_kwh, 100);
  EXPECT_GE(germany->year, 2000);
  // The file in the tree is the one compiled in.
  const auto file = CountryTable::read_file(JOULE_SOURCE_DIR "/data/carbon/country_intensity.csv");
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ(file->countries().size(), table.countries().size());
  // Every country of the table has an alpha-2 code (locales and zone.tab give alpha-2).
  size_t with_alpha2 = 0;
  for (const char* code : {"DE", "US", "FR", "GB", "IN", "CN", "JP", "BR", "ZA", "AU", "CI", "KP"}) {
    with_alpha2 += alpha2_to_alpha3(code).has_value() ? 1 : 0;
  }
  EXPECT_EQ(with_alpha2, 12u);
}

TEST(CountryTable, FindsAlpha3AndAlpha2CaseInsensitively) {
  const auto& table = CountryTable::builtin();
  for (const char* code : {"DEU", "deu", " Deu ", "DE", "de"}) {
    const auto found = table.find(code);
    ASSERT_TRUE(found) << code;
    EXPECT_EQ(found->iso3, "DEU") << code;
  }
  EXPECT_EQ(*alpha2_to_alpha3("us"), "USA");
  EXPECT_FALSE(alpha2_to_alpha3("XX"));
}

TEST(CountryTable, UnknownCodeListsCloseMatches) {
  const auto& table = CountryTable::builtin();
  const auto typo = table.find("DEX");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(typo.error().message().find("unknown country code 'DEX': closest: DEU (Germany), MEX (Mexico)"),
            std::string::npos)
      << typo.error().message();
  EXPECT_NE(typo.error().message().find("(`joule carbon countries` lists them)"), std::string::npos);
  const auto name = table.find("germ");
  ASSERT_FALSE(name);
  EXPECT_NE(name.error().message().find("closest: DEU (Germany)"), std::string::npos)
      << name.error().message();
  const auto nothing = table.find("QQQQQ");
  ASSERT_FALSE(nothing);
  EXPECT_NE(
      nothing.error().message().find("unknown country code 'QQQQQ': not an ISO 3166-1 alpha-3 or alpha-2 "
                                     "code of data/carbon/country_intensity.csv"),
      std::string::npos)
      << nothing.error().message();
  const auto empty = table.find("  ");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(empty.error().message().find("empty country code"), std::string::npos);
}

TEST(CountryTable, BadRowsNameTheLine) {
  const std::string header = "iso3,country,year,carbon_intensity_g_per_kwh\n";
  const auto expect = [&](const std::string& rows, const std::string& message) {
    const auto parsed = CountryTable::parse(header + rows, "t.csv");
    ASSERT_FALSE(parsed) << rows;
    EXPECT_EQ(parsed.error().code(), ErrorCode::kParse);
    EXPECT_NE(parsed.error().message().find(message), std::string::npos) << parsed.error().message();
  };
  expect("DE,Germany,2022,381\n",
         "t.csv:2:1: column 'iso3': expected an ISO 3166-1 alpha-3 code (3 letters), "
         "got \"DE\"");
  expect("DEU,Germany,2022,381\nDEU,Germany,2022,381\n", "t.csv:3:1: column 'iso3': DEU appears twice");
  expect("DEU,Germany,22x,381\n", "t.csv:2:13");
  expect("DEU,Germany,1800,381\n", "the year 1800 is implausible");
  expect("DEU,Germany,2022,-1\n", "the intensity must be finite and non-negative, got -1");
  expect("", "t.csv: no countries in the table");
  const auto missing = CountryTable::parse("iso3,country,year\nDEU,Germany,2022\n", "m.csv");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("carbon_intensity_g_per_kwh"), std::string::npos);
}

TEST(InferCountry, FromTzThenLocalTimeLinkThenTimezoneFile) {
  test::TempDir dir;
  auto sources = country_test_blank(dir);
  sources.tz = ":Europe/Berlin";
  auto guess = infer_country(sources);
  ASSERT_TRUE(guess) << guess.error().message();
  EXPECT_EQ(guess->iso3, "DEU");
  EXPECT_EQ(guess->how, "timezone Europe/Berlin");
  sources.tz = "/usr/share/zoneinfo/posix/America/New_York";
  EXPECT_EQ(infer_country(sources)->iso3, "USA");
  // The localtime link's target, then Debian's /etc/timezone.
  sources.tz.reset();
  std::filesystem::create_symlink("/usr/share/zoneinfo/Asia/Tokyo", sources.localtime_path);
  EXPECT_EQ(infer_country(sources)->iso3, "JPN");
  std::filesystem::remove(sources.localtime_path);
  dir.write("no-timezone", "Europe/Paris\n");
  guess = infer_country(sources);
  ASSERT_TRUE(guess);
  EXPECT_EQ(guess->iso3, "FRA");
  // zone.tab, when there is one, knows zones the built-in map does not.
  sources.tz = "Europe/Tallinn";
  EXPECT_FALSE(infer_country(sources));
  sources.zone_tab = dir.write("zone.tab", "# comment\nEE\t+5925+02445\tEurope/Tallinn\n");
  EXPECT_EQ(infer_country(sources)->iso3, "EST");
}

TEST(InferCountry, FallsBackToTheLocale) {
  test::TempDir dir;
  auto sources = country_test_blank(dir);
  sources.tz = "Etc/UTC";  // no country: the locale decides
  sources.lang = "de_DE.UTF-8";
  auto guess = infer_country(sources);
  ASSERT_TRUE(guess) << guess.error().message();
  EXPECT_EQ(guess->iso3, "DEU");
  EXPECT_EQ(guess->how, "locale LANG=de_DE.UTF-8");
  sources.lc_all = "C.UTF-8";  // LC_ALL without a territory says nothing; LANG still does
  EXPECT_EQ(infer_country(sources)->iso3, "DEU");
  sources.lc_all = "pt_BR@currency";
  EXPECT_EQ(infer_country(sources)->how, "locale LC_ALL=pt_BR@currency");
}

TEST(InferCountry, SaysWhatItLookedAt) {
  test::TempDir dir;
  auto sources = country_test_blank(dir);
  const auto none = infer_country(sources);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(
      none.error().message().find("cannot tell the country for the default carbon intensity: no timezone "
                                  "(TZ unset, "),
      std::string::npos)
      << none.error().message();
  EXPECT_NE(none.error().message().find("LC_ALL unset, LANG unset; pass --country CODE (`joule carbon "
                                        "countries` lists them)"),
            std::string::npos)
      << none.error().message();
  sources.tz = "Mars/Olympus_Mons";
  sources.lang = "POSIX";
  sources.lc_all = "en_XX.UTF-8";
  const auto bad = infer_country(sources);
  ASSERT_FALSE(bad);
  EXPECT_NE(
      bad.error().message().find("timezone Mars/Olympus_Mons (TZ) names no country, LC_ALL=en_XX.UTF-8: "
                                 "territory XX is not in the table, LANG=POSIX names no territory"),
      std::string::npos)
      << bad.error().message();
}

TEST(ChooseCountry, DescribesHowTheCountryWasChosen) {
  test::TempDir dir;
  auto sources = country_test_blank(dir);
  sources.tz = "Europe/Berlin";
  const auto& table = CountryTable::builtin();
  const auto inferred = choose_country(table, "", sources);
  ASSERT_TRUE(inferred) << inferred.error().message();
  const auto germany = *table.find("DEU");
  EXPECT_EQ(inferred->describe(),
            fmt::format("carbon intensity: {:.0f} gCO2eq/kWh, yearly average of Germany (DEU, {}), inferred "
                        "from timezone Europe/Berlin; pass --country to choose",
                        germany.intensity_g_per_kwh, germany.year));
  const auto chosen = choose_country(table, "fra", sources);
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->country.iso3, "FRA");
  EXPECT_NE(chosen->describe().find("(FRA, "), std::string::npos);
  EXPECT_NE(chosen->describe().find(", chosen with --country"), std::string::npos);
  EXPECT_EQ(chosen->describe().find("pass --country"), std::string::npos);
  // A zone whose country the table lacks.
  sources.tz = "Europe/Tallinn";
  sources.zone_tab = dir.write("zone.tab", "AQ\t-7750+16636\tEurope/Tallinn\n");
  const auto missing = choose_country(table, "", sources);
  ASSERT_FALSE(missing);
  EXPECT_NE(
      missing.error().message().find("timezone Europe/Tallinn (TZ) is in AQ, which has no alpha-3 code"),
      std::string::npos)
      << missing.error().message();
}

TEST(MakeCarbonSignal, CountryGivesItsYearlyAverage) {
  CarbonSourceOptions options;
  options.country = "DEU";
  const auto signal = make_carbon_signal(options);
  ASSERT_TRUE(signal) << signal.error().message();
  EXPECT_NE((*signal)->describe().find("yearly average of Germany (DEU, "), std::string::npos);
  EXPECT_DOUBLE_EQ((*signal)->latest()->intensity_g_per_kwh,
                   CountryTable::builtin().find("DEU")->intensity_g_per_kwh);
  options.intensity_g_per_kwh = 100;
  const auto two = make_carbon_signal(options);
  ASSERT_FALSE(two);
  EXPECT_NE(two.error().message().find("--zone Z or --country CODE (got 2)"), std::string::npos);
  CarbonSourceOptions bad;
  bad.country = "ZZZZ";
  const auto unknown = make_carbon_signal(bad);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("unknown country code 'ZZZZ'"), std::string::npos);
}

}  // namespace
}  // namespace joule::carbon
