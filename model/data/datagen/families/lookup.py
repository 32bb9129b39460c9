"""Families that look things up and report: web search Q&A, weather, calendar scheduling, SQL analytics.

Each family writes one healthy run into a :class:`~model.data.datagen.scenario.Scenario`
(:mod:`model.data.datagen.families`)."""

from __future__ import annotations

from typing import Any

from model.data.datagen.families.goals import goal, system_prompt
from model.data.datagen.lexicon import COMPANIES, CONDITIONS, PRODUCTS, WEEKDAYS_EN, WEEKDAYS_ZH
from model.data.datagen.scenario import Constraint, Scenario

# --------------------------------------------------------------------------- search_qa


SITES = ["en.wikipedia.org", "britannica.com", "reuters.com", "statista.com", "gov.example", "bloomberg.com",
         "forbes.com", "worldbank.org", "citypopulation.de", "idc.com"]


def search_qa(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("web_search", "Search the web; returns ranked snippets.", {"query": "string", "k": "integer"},
            ["query"])
    sc.tool("fetch_page", "Fetch a web page as text.", {"url": "string"}, ["url"])
    system_prompt(sc, ["You are a research assistant. Use the tools and cite sources.",
                       "You answer questions using web search. Be concise and cite the page you used."],
                  ["你是一名研究助理，请使用工具回答并注明来源。", "你通过网络搜索回答问题，回答要简洁并注明出处。"])
    comp = r.choice(COMPANIES)
    c = lx.city()
    kind = r.randrange(3)
    year = r.randrange(1952, 2016)
    ceo = lx.person()
    pop = r.randrange(300_000, 14_000_000)
    fake_year = year + r.choice([-7, -3, 4, 9])
    fake_pop = int(pop * r.uniform(0.55, 1.6))
    site = r.choice(SITES)
    url = f"https://{site}/wiki/{(c[0] if kind == 1 else comp[0]).replace(' ', '_')}"
    if kind == 0:
        goal(sc, "founded", ["When was {co} founded, and who runs it now?",
                             "I need the founding year of {co} and the name of its current CEO.",
                             "quick one: {co} - year founded + current chief executive?",
                             "Can you look up {co}? I want to know when it was established and who leads it."],
             ["{co}是哪一年成立的？现在的CEO是谁？", "帮我查一下{co}的成立年份和现任首席执行官。",
              "请问{co}成立于哪年，目前由谁负责？"], co=lx.pair(comp))
        q = f"{comp[0]} founded year CEO"
        snippet = (f"{comp[0]} was founded in {year}. In {lx.base_date.year - 1} the board appointed "
                   f"{ceo.en} as chief executive.")
        y0 = lx.base_date.year - 1

        def ans0(yr: int, boss: Any, src: str) -> str:
            return sc.t([f"{comp[0]} was founded in {yr}, and its current CEO is {boss.en} (source: {src}).",
                         f"According to {src}, {comp[0]} dates back to {yr}; {boss.en} has led it as CEO since {y0}.",
                         f"Founded: {yr}. Current CEO: {boss.en} ({src}).",
                         f"{comp[0]} was established in {yr}. It is currently run by {boss.en}, per {src}."],
                        [f"{comp[1]}成立于{yr}年，现任CEO是{boss.zh}（来源：{src}）。",
                         f"根据{src}，{comp[1]}创立于{yr}年，自{y0}年起由{boss.zh}担任CEO。",
                         f"成立年份：{yr}年；现任首席执行官：{boss.zh}（{src}）。"])

        sc.final_ok = ans0(year, ceo, site)
        sc.final_invented = ans0(fake_year, lx.person(), r.choice(SITES))
    elif kind == 1:
        goal(sc, "population", ["What's the current population of {city}?",
                                "How many people live in {city} these days? Please give a source.",
                                "Population of {city} (latest estimate)?"],
             ["{city}现在的人口是多少？", "请查一下{city}最新的人口数据，并给出来源。", "{city}常住人口大概多少？"],
             city=lx.cname(c))
        q = f"{c[0]} population latest estimate"
        snippet = f"The population of {c[0]} was estimated at {pop:,} in {lx.base_date.year - 1}."
        y0 = lx.base_date.year - 1

        def ans1(n: int, src: str) -> str:
            return sc.t([f"The latest estimate puts {c[0]}'s population at about {n:,} ({src}).",
                         f"{c[0]} has roughly {n:,} residents according to {src}'s {y0} figure.",
                         f"About {n:,} people ({src}, {y0} estimate).",
                         f"{c[0]}: population ≈ {n:,} as of {y0}, per {src}."],
                        [f"最新估计{c[1]}人口约为{n:,}人（来源：{src}）。",
                         f"根据{src}{y0}年的数据，{c[1]}约有{n:,}人。",
                         f"{c[1]}常住人口约{n:,}人（{src}，{y0}年估计）。"])

        sc.final_ok = ans1(pop, site)
        sc.final_invented = ans1(fake_pop, r.choice(SITES))
    else:
        p = r.choice(PRODUCTS)
        share = r.randrange(8, 41)
        fake_share = share + r.choice([-6, 5, 11])
        goal(sc, "market_share", ["What market share does {co} have in {prod}?",
                                  "Find {co}'s share of the {prod} market, with the year of the figure.",
                                  "how big is {co} in the {prod} segment (market share %)?"],
             ["{co}在{prod}市场的份额是多少？", "帮我找一下{co}在{prod}领域的市场占有率，以及数据年份。"],
             co=lx.pair(comp), prod=lx.pair(p))
        q = f"{comp[0]} {p[0]} market share"
        snippet = f"{comp[0]} held {share}% of the {p[0]} market in {lx.base_date.year - 1}, up from {share - 2}%."
        y0 = lx.base_date.year - 1

        def ans2(sh: int, src: str) -> str:
            return sc.t([f"{comp[0]} held about {sh}% of the {p[0]} market in {y0} ({src}).",
                         f"Per {src}, {comp[0]}'s share of {p[0]} was {sh}% last year.",
                         f"Roughly {sh}% ({y0}, {src}).",
                         f"{comp[0]} accounts for about {sh}% of {p[0]} sales, according to {src}."],
                        [f"{comp[1]}在{y0}年占{p[1]}市场约{sh}%（来源：{src}）。",
                         f"据{src}，{comp[1]}去年在{p[1]}市场的份额为{sh}%。",
                         f"约{sh}%（{y0}年数据，{src}）。"])

        sc.final_ok = ans2(share, site)
        sc.final_invented = ans2(fake_share, r.choice(SITES))
    results = [{"title": f"{c[0] if kind == 1 else comp[0]} - {site.split('.')[0].title()}", "url": url,
                "snippet": snippet}]
    for _ in range(r.randrange(1, 4)):
        other_c = r.choice(COMPANIES)
        results.append({"title": f"{other_c[0]} annual report", "url": f"https://{other_c[0].split()[0].lower()}"
                        f".example.com/ir", "snippet": f"{other_c[0]} reported revenue growth of "
                        f"{r.randrange(2, 30)}% in fiscal {lx.base_date.year - 1}."})
    r.shuffle(results[1:])
    sc.call("web_search", {"query": q, "k": len(results)}, {"results": results, "total": len(results)},
            thought=sc.t(["Let me search for that.", "I'll look this up.", "Searching the web first."],
                         ["我先搜索一下。", "我来查一下。", "先用网络搜索。"]) if r.random() < 0.7 else None,
            empty={"results": [], "total": 0}, key=True)
    if r.random() < 0.6:
        sc.call("fetch_page", {"url": url}, {"url": url, "status": 200, "text": snippet + " " + r.choice(
            ["The company is headquartered in " + lx.city()[0] + ".", "Figures are unaudited.",
             "Last edited " + lx.fdate(lx.day()) + "."])},
                thought=sc.t(["Opening the top result to confirm.", "Let me read the source page."],
                             ["打开第一个结果确认一下。", "我读一下原始页面。"]))
    sc.final_empty = sc.t(["I searched but couldn't find a reliable figure for this; the search returned no "
                           "relevant results. Could you point me to a source?",
                           "No results came back for that query, so I can't give you a verified answer yet."],
                          ["我搜索了，但没有找到可靠的数据，搜索没有返回相关结果。你能提供一个来源吗？",
                           "这个查询没有返回任何结果，所以我暂时无法给出经过核实的答案。"])
    sc.final_fail = sc.t(["The search tool returned an error, so I couldn't verify this. Want me to try again "
                          "later?", "I wasn't able to complete the lookup: the search service failed."],
                         ["搜索工具返回了错误，我无法核实这个信息。要我稍后再试吗？", "查询没能完成：搜索服务出错了。"])


# --------------------------------------------------------------------------- weather


def weather(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("geocode", "Resolve a place name to coordinates.", {"place": "string"}, ["place"])
    sc.tool("get_forecast", "Daily forecast for coordinates and a date.",
            {"lat": "number", "lon": "number", "date": "string", "units": "string"}, ["lat", "lon", "date"])
    system_prompt(sc, ["You are a helpful travel and weather assistant.", "You help users plan around the weather."],
                  ["你是一个出行和天气助手。", "你帮助用户根据天气做安排。"])
    c = lx.city()
    d = lx.day(1, 10)
    cond = r.choice(CONDITIONS)
    hi = r.randrange(-5, 36)
    lo = hi - r.randrange(3, 12)
    rain = r.randrange(0, 101, 5)
    units_f = (not sc.zh) and r.random() < 0.3
    goal(sc, "forecast", ["What's the weather going to be like in {city} on {day}?",
                          "Will it rain in {city} on {day}? I'm deciding whether to bring an umbrella.",
                          "forecast for {city}, {day} please",
                          "I'm flying to {city} and land on {day}. How warm will it be?"],
         ["{day}{city}天气怎么样？", "{day}{city}会下雨吗？我在考虑要不要带伞。", "帮我查下{city}{day}的天气预报",
          "我{day}到{city}，那天气温大概多少？"], city=lx.cname(c), day=lx.fdate(d))
    lat, lon = round(r.uniform(-40, 60), 4), round(r.uniform(-120, 150), 4)
    sc.call("geocode", {"place": c[0]}, {"place": c[0], "country": c[2], "lat": lat, "lon": lon},
            thought=sc.t(["First I need the coordinates.", "Looking up the location."],
                         ["先查一下坐标。", "先定位城市。"]) if r.random() < 0.5 else None)
    units = "imperial" if units_f else "metric"

    def deg(x: int) -> str:
        return f"{round(x * 9 / 5 + 32)}°F" if units_f else f"{x}°C"

    fc = {"date": d.isoformat(), "lat": lat, "lon": lon, "units": units,
          "daily": {"condition": cond[0], "temp_max": round(hi * 9 / 5 + 32) if units_f else hi,
                    "temp_min": round(lo * 9 / 5 + 32) if units_f else lo, "precip_prob": rain,
                    "wind_kph": r.randrange(2, 45)}}
    sc.call("get_forecast", {"lat": lat, "lon": lon, "date": d.isoformat(), "units": units}, fc,
            empty={"date": d.isoformat(), "daily": None, "message": "no forecast available for this date"},
            key=True)
    def wans(cd: tuple[str, str], lo_: int, hi_: int, rp: int, fahr: bool) -> str:
        def dg(x: int) -> str:
            return f"{round(x * 9 / 5 + 32)}°F" if fahr else f"{x}°C"

        umb_en = r.choice(["I'd bring an umbrella.", "Pack an umbrella."]) if rp >= 50 else r.choice(
            ["You probably won't need an umbrella.", "An umbrella shouldn't be necessary.", ""])
        umb_zh = r.choice(["建议带伞。", "记得带伞。"]) if rp >= 50 else r.choice(["应该不用带伞。", ""])
        return sc.t([f"In {c[0]} on {lx.fdate(d)}: {cd[0]}, between {dg(lo_)} and {dg(hi_)}, with a {rp}% chance "
                     f"of rain. {umb_en}",
                     f"Expect {cd[0]} weather in {c[0]} - a high of {dg(hi_)}, a low of {dg(lo_)}, and {rp}% chance "
                     f"of precipitation. {umb_en}",
                     f"{lx.fdate(d)} in {c[0]}: {cd[0]}, {dg(lo_)}-{dg(hi_)}, precipitation {rp}%. {umb_en}",
                     f"The forecast for {c[0]} says {cd[0]} with temperatures from {dg(lo_)} to {dg(hi_)}; rain "
                     f"chance {rp}%. {umb_en}"],
                    [f"{lx.fdate(d)}{c[1]}天气{cd[1]}，气温{dg(lo_)}到{dg(hi_)}，降水概率{rp}%。{umb_zh}",
                     f"{c[1]}那天{cd[1]}，最高{dg(hi_)}，最低{dg(lo_)}，降雨概率{rp}%。{umb_zh}",
                     f"预报显示{c[1]}{lx.fdate(d)}{cd[1]}，{dg(lo_)}~{dg(hi_)}，降水概率{rp}%。{umb_zh}"]).strip()

    sc.final_ok = wans(cond, lo, hi, rain, units_f)
    fh = hi + r.choice([-9, -5, 6, 10])
    sc.final_invented = wans(r.choice(CONDITIONS), fh - r.randrange(3, 10), fh, r.randrange(0, 101, 10), units_f)
    sc.final_empty = sc.t([f"The forecast service has no data for {c[0]} on that date yet (it's probably too far "
                           "out). I can check again closer to the day.",
                           "I couldn't get a forecast for that date; the service returned nothing."],
                          [f"天气服务暂时没有{c[1]}那天的预报（可能日期太远）。我可以临近时再查。",
                           "没能拿到那天的预报，服务没有返回数据。"])
    sc.final_fail = sc.t(["The weather service failed when I requested the forecast, so I can't tell you yet.",
                          "Sorry - the forecast API returned an error. Please try again in a bit."],
                         ["请求天气预报时服务出错了，暂时无法告诉你结果。", "天气接口返回了错误，请稍后再试。"])
    if units_f and r.random() < 0.5:
        pass
    elif not units_f and r.random() < 0.45:
        # the goal asks for Fahrenheit / the answer keeps Celsius: an earlier constraint forgotten
        sc.goal += sc.t([" Please give temperatures in Fahrenheit.", " (Fahrenheit please, I'm American.)"],
                        ["请用华氏度告诉我。", "温度请用华氏度表示。"])
        sc.final_ok = wans(cond, lo, hi, rain, True)
        sc.final_invented = wans(r.choice(CONDITIONS), fh - r.randrange(3, 10), fh, r.randrange(0, 101, 10), True)
        sc.constraint = Constraint("fahrenheit", wans(cond, lo, hi, rain, False))
    if r.random() < 0.3:
        # a second day: longer traces
        d2 = lx.day(10, 14)
        sc.call("get_forecast", {"lat": lat, "lon": lon, "date": d2.isoformat(), "units": units},
                {"date": d2.isoformat(), "daily": {"condition": r.choice(CONDITIONS)[0], "temp_max": hi + 1,
                                                   "temp_min": lo + 1, "precip_prob": r.randrange(0, 101, 5)}},
                thought=sc.t(["Let me also check the day after for comparison.", "Checking the next day too."],
                             ["顺便看一下第二天。", "我再查一下后一天作对比。"]))


# --------------------------------------------------------------------------- calendar


def calendar(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("list_events", "List calendar events for a person and a day.", {"person": "string", "date": "string"},
            ["person", "date"])
    sc.tool("find_free_slots", "Common free slots of attendees.", {"attendees": "array", "date": "string",
                                                                    "duration_min": "integer"},
            ["attendees", "date", "duration_min"])
    sc.tool("create_event", "Create a meeting and invite attendees.", {"title": "string", "start": "string",
                                                                        "duration_min": "integer",
                                                                        "attendees": "array"},
            ["title", "start", "attendees"])
    system_prompt(sc, ["You are a scheduling assistant with access to the team calendar.", "Schedule meetings for the user."],
                  ["你是日程助手，可以访问团队日历。", "帮用户安排会议。"])
    ppl = [lx.person() for _ in range(r.randrange(2, 5))]
    d = lx.day(1, 20)
    dur = r.choice([30, 45, 60])
    wd = d.weekday()
    topic = r.choice([("Q3 planning", "三季度规划"), ("design review", "设计评审"), ("1:1", "一对一沟通"),
                      ("vendor call", "供应商电话会"), ("incident retro", "故障复盘")])
    goal(sc, "schedule", ["Set up a {m}-minute {t} with {p} on {d}.",
                          "Find a time on {d} for a {t} ({m} min) with {p} and send the invite.",
                          "can you book {m} min with {p} {d} for the {t}?"],
         ["帮我和{p}在{d}约一个{m}分钟的{t}。", "{d}找个时间和{p}开{m}分钟的{t}，并发送邀请。"],
         m=dur, t=lx.pair(topic), p=("、" if sc.zh else ", ").join(lx.name(p) for p in ppl), d=lx.fdate(d))
    slots = sorted({f"{h:02d}:{mm}" for h, mm in ((r.randrange(8, 18), r.choice(["00", "30"])) for _ in range(4))})
    morning = [s for s in slots if int(s[:2]) < 10]
    later = [s for s in slots if int(s[:2]) >= 10] or ["14:00"]
    if not morning:
        morning = ["09:00"]
        slots = sorted(set(slots) | {"09:00"})
    slots = sorted(set(slots) | set(later))
    if r.random() < 0.5:
        sc.call("list_events", {"person": ppl[0].en, "date": d.isoformat()},
                {"events": [{"title": r.choice(["standup", "lunch", "focus time", "interview"]),
                             "start": f"{r.randrange(8, 17):02d}:00", "duration_min": 30} for _ in range(r.randrange(1, 4))]})
    sc.call("find_free_slots", {"attendees": [p.email for p in ppl], "date": d.isoformat(), "duration_min": dur},
            {"date": d.isoformat(), "slots": slots, "timezone": r.choice(["Europe/Berlin", "Asia/Shanghai",
                                                                         "America/New_York"])},
            key=True, empty={"date": d.isoformat(), "slots": []},
            thought=sc.t(["Checking everyone's availability.", "Looking for a common slot."],
                         ["查看大家的空闲时间。", "找一个共同空闲的时段。"]) if r.random() < 0.6 else None)
    # the constraint is decided first: without it any common slot will do, mornings included
    constrained = r.random() < 0.45
    pick = later[0] if constrained else r.choice(slots)
    cid = sc.call("create_event", {"title": topic[0], "start": f"{d.isoformat()}T{pick}", "duration_min": dur,
                                   "attendees": [p.email for p in ppl]},
                  {"event_id": lx.ident("evt_", 8, digits=False), "status": "invites_sent"})
    wdn = WEEKDAYS_ZH[wd] if sc.zh else WEEKDAYS_EN[wd]
    def cans(at: str) -> str:
        return sc.t([f"Booked the {topic[0]} on {wdn} {lx.fdate(d)} at {at} for {dur} minutes; invites went to "
                     f"{', '.join(p.en for p in ppl)}.", f"Done - {at} on {lx.fdate(d)} worked for everyone. Invites "
                     "are out.", f"Scheduled: {topic[0]}, {lx.fdate(d)} {at} ({dur} min). Everyone's invited.",
                     f"The {topic[0]} is on the calendar for {wdn} at {at}."],
                    [f"已安排{lx.fdate(d)}（{wdn}）{at}的{topic[1]}，时长{dur}分钟，邀请已发给{'、'.join(p.zh for p in ppl)}。",
                     f"好了，{lx.fdate(d)} {at}大家都有空，邀请已发出。", f"已预约：{topic[1]}，{lx.fdate(d)} {at}，{dur}分钟。"])

    sc.final_ok = cans(pick)
    sc.final_invented = cans(f"{r.randrange(9, 17):02d}:{r.choice(['00', '30'])}")
    if constrained:
        sc.goal += sc.t([" Nothing before 10am please.", " Not before 10:00 - I have school drop-off."],
                        ["上午10点之前不行。", "请不要安排在10点以前。"])
        bad = morning[0]
        sc.constraint = Constraint("not_before_10", cans(bad),
                                   (cid, {"title": topic[0], "start": f"{d.isoformat()}T{bad}", "duration_min": dur,
                                          "attendees": [p.email for p in ppl]}))
    sc.meta["dependent_call"] = cid
    sc.final_empty = sc.t([f"There's no common free slot on {lx.fdate(d)}. Want me to look at the next day?",
                           "Nobody has a shared opening that day, so I haven't sent anything."],
                          [f"{lx.fdate(d)}没有大家都空闲的时段，要看看第二天吗？", "那天没有共同空闲时间，我没有发邀请。"])
    sc.final_fail = sc.t(["The calendar service returned an error, so no meeting was created.",
                          "I couldn't reach the calendar API; nothing has been scheduled."],
                         ["日历服务返回错误，会议没有创建。", "无法连接日历接口，尚未安排。"])


# --------------------------------------------------------------------------- sql_analytics


def sql_analytics(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("describe_table", "Columns of a table.", {"table": "string"}, ["table"])
    sc.tool("run_sql", "Run a read-only SQL query.", {"query": "string", "limit": "integer"}, ["query"])
    system_prompt(sc, ["You are a data analyst with read-only access to the warehouse.", "Answer questions with SQL."],
                  ["你是数据分析师，对数据仓库有只读权限。", "用SQL回答问题。"])
    region = r.choice([("EMEA", "欧洲中东非洲"), ("APAC", "亚太"), ("North America", "北美"), ("LATAM", "拉美")])
    q = r.randrange(1, 5)
    yr = r.randrange(2021, 2025)
    rev = r.randrange(200_000, 9_000_000)
    top = [(lx.pair(p), r.randrange(1000, 90000)) for p in r.sample(PRODUCTS, 3)]
    top.sort(key=lambda x: -x[1])
    goal(sc, "revenue", ["What was total revenue in {reg} for Q{q} {y}, and the top 3 products?",
                         "Pull Q{q} {y} revenue for {reg} plus the three best-selling products.",
                         "Need numbers: {reg}, Q{q} {y} - revenue and top products."],
         ["{y}年第{q}季度{reg}的总收入是多少？前三名产品是哪些？", "查一下{reg}{y}年Q{q}的收入和销量前三的产品。"],
         reg=lx.pair(region), q=q, y=yr)
    if r.random() < 0.5:
        sc.call("describe_table", {"table": "sales"}, {"table": "sales", "columns": [
            {"name": "order_id", "type": "bigint"}, {"name": "region", "type": "text"}, {"name": "product", "type":
            "text"}, {"name": "amount", "type": "numeric"}, {"name": "is_refund", "type": "boolean"},
            {"name": "order_date", "type": "date"}]})
    excl = r.random() < 0.45
    where = f"region = '{region[0]}' AND order_date >= '{yr}-{3 * q - 2:02d}-01' AND order_date < " \
            f"'{yr if q < 4 else yr + 1}-{(3 * q + 1) if q < 4 else 1:02d}-01'"
    if excl:
        sc.goal += sc.t([" Exclude refunds.", " Refunds should not count."], ["不要计入退款。", "退款不算在内。"])
        where_ok = where + " AND NOT is_refund"
    else:
        where_ok = where
    sc.call("run_sql", {"query": f"SELECT SUM(amount) FROM sales WHERE {where_ok}"},
            {"columns": ["sum"], "rows": [[rev]], "row_count": 1}, key=True,
            empty={"columns": ["sum"], "rows": [[None]], "row_count": 1},
            thought=sc.t(["Querying total revenue.", "First the total."], ["先查总收入。", "先算总额。"])
            if r.random() < 0.6 else None)
    sc.call("run_sql", {"query": f"SELECT product, SUM(amount) s FROM sales WHERE {where_ok} GROUP BY 1 ORDER BY 2 "
                                 "DESC LIMIT 3"},
            {"columns": ["product", "s"], "rows": [[p, v] for p, v in top], "row_count": 3})
    tops = ", ".join(f"{p} ({v:,})" for p, v in top)
    tops_zh = "、".join(f"{p}（{v:,}）" for p, v in top)

    def qans(total: int) -> str:
        return sc.t([f"Q{q} {yr} revenue in {region[0]} was {total:,}. Top products: {tops}.",
                     f"{region[0]} brought in {total:,} in Q{q} {yr}; the leaders were {tops}.",
                     f"Revenue ({region[0]}, Q{q} {yr}): {total:,}. Best sellers: {tops}.",
                     f"Total for the quarter: {total:,}. Top 3 by revenue - {tops}."],
                    [f"{yr}年Q{q}{region[1]}总收入为{total:,}，前三名产品：{tops_zh}。",
                     f"{region[1]}{yr}年第{q}季度收入{total:,}，销量前三：{tops_zh}。",
                     f"本季度总收入{total:,}；收入前三的产品：{tops_zh}。"])

    sc.final_ok = qans(rev)
    sc.final_invented = qans(int(rev * r.uniform(0.5, 1.6)))
    if excl:
        gross = int(rev * r.uniform(1.04, 1.15))
        sc.constraint = Constraint("exclude_refunds", qans(gross),
                                   (sc.n_calls - 2, {"query": f"SELECT SUM(amount) FROM sales WHERE {where}"}))
        sc.meta["violating_payload"] = {"columns": ["sum"], "rows": [[gross]], "row_count": 1}
    sc.final_empty = sc.t([f"The query returned no revenue for {region[0]} in Q{q} {yr} - the table may not be loaded "
                           "for that quarter yet.", "No rows matched, so I can't report a figure."],
                          [f"查询没有返回{region[1]}{yr}年Q{q}的收入数据，可能该季度数据尚未入库。", "没有匹配的数据，无法给出数字。"])
    sc.final_fail = sc.t(["The warehouse query failed, so I don't have the numbers.", "The SQL engine returned an "
                          "error; I'll need to retry."], ["数据仓库查询失败，暂时拿不到数字。", "SQL引擎报错，需要重试。"])


__all__ = ["search_qa", "weather", "calendar", "sql_analytics"]
