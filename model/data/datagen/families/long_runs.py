"""Families with long runs: multi-source literature research, and a multi-agent team (a coordinator
and two members).

Each family writes one healthy run into a :class:`~model.data.datagen.scenario.Scenario`
(:mod:`model.data.datagen.families`)."""

from __future__ import annotations

from typing import Any

from model.data.datagen.families.goals import goal, system_prompt
from model.data.datagen.lexicon import TOPICS
from model.data.datagen.scenario import Constraint, Scenario

# --------------------------------------------------------------------------- research (long runs)


EFFECTS = [("a modest effect", "效果温和"), ("a strong association", "强相关"), ("no significant effect", "无显著影响"),
           ("mixed results", "结果不一"), ("a 12% reduction", "降低12%"), ("a 2x increase", "增加一倍"),
           ("a 30% reduction", "降低30%"), ("a small but robust effect", "效应小但稳健")]


def research(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    sc.tool("search_papers", "Search the literature; paginated.", {"query": "string", "page": "integer",
                                                                    "year_from": "integer"}, ["query"])
    sc.tool("read_paper", "Read the abstract and key results of a paper.", {"paper_id": "string"}, ["paper_id"])
    sc.tool("save_note", "Save a note to the research notebook.", {"text": "string"}, ["text"])
    system_prompt(sc, ["You are a literature-review agent. Read several sources before concluding.",
                       "Research assistant: gather evidence from papers, take notes, then summarise."],
                  ["你是文献综述助手，下结论前要阅读多篇文献。", "研究助理：检索论文、做笔记，然后总结。"])
    topic = r.choice(TOPICS)
    yf = r.choice([2015, 2018, 2020])
    goal(sc, "review", ["Summarise what recent research says about {t}.",
                        "I'm writing a brief on {t}. What are the main findings since {y}?",
                        "Do a quick literature review on {t} and tell me the consensus.",
                        "What does the evidence say on {t}? Give me 3-4 key findings with citations."],
         ["总结一下关于{t}的最新研究结论。", "我在写一份关于{t}的简报，{y}年以来的主要发现有哪些？", "请对{t}做一个简短的文献综述。"],
         t=lx.pair(topic), y=yf)
    if r.random() < 0.4:
        sc.goal += sc.t([f" Only use studies published in {yf} or later.", f" Ignore anything before {yf}."],
                        [f"只使用{yf}年及以后发表的研究。", f"{yf}年之前的不要用。"])
        sc.meta["year_from"] = yf
    pages = r.randrange(1, 6)
    found: list[dict[str, Any]] = []
    first = True
    for pg in range(1, pages + 1):
        papers = []
        for _ in range(r.randrange(2, 5)):
            au = lx.person().en.split()[1]
            papers.append({"paper_id": lx.ident("P", 6), "title": f"{r.choice(['Evidence on', 'Revisiting', 'A cohort study of', 'Modelling', 'Measuring'])} "
                           f"{topic[0]}", "authors": f"{au} et al.", "year": r.randrange(yf - 6, 2025),
                           "citations": r.randrange(0, 900)})
        found += papers
        sc.call("search_papers", {"query": topic[0], "page": pg, "year_from": yf},
                {"page": pg, "total_pages": pages, "results": papers},
                key=first, empty={"page": pg, "total_pages": 0, "results": []},
                thought=sc.t([f"Fetching page {pg} of results." if pg > 1 else "Starting with a literature search.",
                              "Next page." if pg > 1 else "Searching papers."],
                             [f"获取第{pg}页结果。" if pg > 1 else "先做文献检索。", "下一页。" if pg > 1 else "检索论文。"])
                if r.random() < 0.6 else None)
        first = False
    recent = [p for p in found if p["year"] >= yf] or found[:1]
    reads = r.sample(recent, min(len(recent), r.randrange(2, 6)))
    findings = []
    for p in reads:
        eff, eff_zh = r.choice(EFFECTS)
        n = r.randrange(40, 50000)
        sc.call("read_paper", {"paper_id": p["paper_id"]},
                {"paper_id": p["paper_id"], "title": p["title"], "year": p["year"],
                 "abstract": f"We study {topic[0]} using data from {n} participants/sites and find {eff}.",
                 "n": n})
        findings.append((p, eff, eff_zh, n))
        if r.random() < 0.5:
            sc.call("save_note", {"text": f"{p['authors']} ({p['year']}): {eff}, n={n}"}, {"saved": True,
                                                                                       "note_id": r.randrange(1, 999)})
    effects = EFFECTS
    verdict = r.randrange(3)

    def resans(items: list[tuple[str, int, str, str, int]]) -> str:
        en = "; ".join(f"{a} {y} report {e} (n={n})" for a, y, e, _, n in items)
        zh = "；".join(f"{a}（{y}）发现{z}（样本{n}）" for a, y, _, z, n in items)
        ve = ["suggestive but not conclusive", "fairly consistent", "still mixed"][verdict]
        vz = ["有提示性但尚不确定", "较为一致", "仍有分歧"][verdict]
        return sc.t([f"Here is what the recent literature on {topic[0]} says: {en}. Overall the evidence is {ve}.",
                     f"Key findings on {topic[0]} - {en}.",
                     f"I read {len(items)} studies. {en}. My read: the evidence is {ve}.",
                     f"Summary ({topic[0]}): {en}."],
                    [f"关于{topic[1]}的近期研究：{zh}。总体来看证据{vz}。", f"{topic[1]}的主要发现：{zh}。",
                     f"我阅读了{len(items)}篇研究：{zh}。总体判断：证据{vz}。"])

    items = [(p["authors"], p["year"], eff, eff_zh, n) for p, eff, eff_zh, n in findings]
    sc.final_ok = resans(items)
    fakes = []
    for _ in range(len(items)):
        e = r.choice(effects)
        fakes.append((f"{lx.person().en.split()[1]} et al.", r.randrange(yf, 2025), e[0], e[1], r.randrange(50, 9000)))
    sc.final_invented = resans(fakes)
    old = [p for p in found if p["year"] < yf]
    if "year_from" in sc.meta and old:
        p = old[0]
        e = r.choice(effects)
        sc.constraint = Constraint("year_from", resans([(p["authors"], p["year"], e[0], e[1], r.randrange(40, 9000))]
                                                       + items))
    sc.final_empty = sc.t([f"The search returned no papers on {topic[0]}, so I can't summarise the evidence. Try a "
                           "broader query?", "I found nothing relevant in the literature index for that query."],
                          [f"没有检索到关于{topic[1]}的论文，无法总结。要不要换个更宽泛的检索词？", "文献库里没有找到相关结果。"])
    sc.final_fail = sc.t(["The paper search service failed, so this review is incomplete; I'd rather not summarise "
                          "from memory.", "I couldn't retrieve the papers (service error)."],
                         ["论文检索服务出错，综述不完整，我不想凭记忆总结。", "无法获取论文（服务错误）。"])


# --------------------------------------------------------------------------- multi_agent


def multi_agent(sc: Scenario) -> None:
    lx, r = sc.lx, sc.rng
    roles = r.choice([("Planner", "Coder", "Reviewer"), ("Orchestrator", "WebSurfer", "Assistant"),
                      ("Manager", "DataAnalysis_Expert", "Verification_Expert")])
    sc.speakers = {roles[0]: "assistant", roles[1]: "assistant", roles[2]: "assistant",
                   "Computer_terminal": "tool"}
    sc.tool("execute_code", "Run code in the terminal.", {"code": "string", "lang": "string"}, ["code"])
    sc.tool("web_search", "Search the web.", {"query": "string"}, ["query"])
    sc.agent = roles[0]
    system_prompt(sc, [f"You are {roles[0]}, coordinating {roles[1]} and {roles[2]}. Hand off sub-tasks and verify results.",
                       "Group chat manager: plan, delegate, verify, then answer."],
                  [f"你是{roles[0]}，协调{roles[1]}和{roles[2]}，分派子任务并核对结果。", "群聊管理者：规划、分派、核对，然后作答。"])
    c = lx.city()
    year = r.randrange(2015, 2024)
    n_rows = r.randrange(120, 5000)
    val = round(r.uniform(2, 40), 1)
    goal(sc, "data_task", ["Using the attached sales.csv, what was the average order value in {city} in {y}?",
                           "Team: figure out the average order value for {city} customers in {y} from sales.csv.",
                           "From sales.csv compute {city}'s {y} average order value and double-check it."],
         ["根据附件sales.csv，{y}年{city}的平均订单金额是多少？", "团队任务：从sales.csv算出{y}年{city}客户的平均订单金额，并复核。"],
         city=lx.cname(c), y=year)
    sc.say(sc.t([f"Plan: 1) {roles[1]} loads sales.csv and filters city={c[0]}, year={year}; 2) compute the mean "
                 f"of order_value; 3) {roles[2]} verifies.", f"{roles[1]}, please load the data and compute the "
                 f"average for {c[0]} in {year}. {roles[2]} will check."],
                [f"计划：1）{roles[1]}读取sales.csv并筛选城市={c[1]}、年份={year}；2）计算order_value均值；3）{roles[2]}复核。",
                 f"{roles[1]}请读取数据并计算{c[1]}{year}年的平均值，{roles[2]}负责核对。"]), speaker=roles[0])
    code1 = ("import pandas as pd\ndf = pd.read_csv('sales.csv')\nprint(df.columns.tolist(), len(df))")
    sc.call("execute_code", {"code": code1, "lang": "python"},
            f"exitcode: 0 (execution succeeded)\nCode output: ['order_id', 'city', 'year', 'status', 'order_value'] "
            f"{n_rows}\n",
            speaker=roles[1], thought=sc.t(["Loading the file first.", "Let me inspect the columns."],
                                           ["先读取文件。", "先看看有哪些列。"]))
    code2_all = (f"sub = df[(df.city == '{c[0]}') & (df.year == {year})]\nprint(len(sub), "
                 "round(sub.order_value.mean(), 1))")
    k = r.randrange(5, n_rows // 4)
    excl = r.random() < 0.4
    k_all, val_all = k, val
    code2 = code2_all
    if excl:
        sc.goal += sc.t([" Exclude cancelled orders.", " Cancelled orders must not count."],
                        ["不要计入已取消的订单。", "已取消的订单不算。"])
        code2 = (f"sub = df[(df.city == '{c[0]}') & (df.year == {year}) & (df.status != 'cancelled')]\n"
                 "print(len(sub), round(sub.order_value.mean(), 1))")
        k_all, val_all = k + r.randrange(3, 40), round(val * r.uniform(0.8, 0.97), 1)
    c2_no = sc.n_calls
    sc.call("execute_code", {"code": code2, "lang": "python"},
            f"exitcode: 0 (execution succeeded)\nCode output: {k} {val}\n", speaker=roles[1], key=True,
            empty="exitcode: 0 (execution succeeded)\nCode output: 0 nan\n")
    sc.say(sc.t([f"{k} orders match; the mean order value is {val}. Handing over to {roles[2]}.",
                 f"Result: mean={val} over {k} rows. {roles[2]}, please verify."],
                [f"符合条件的订单有{k}条，平均订单金额为{val}。交给{roles[2]}核对。", f"结果：{k}行，均值={val}。请{roles[2]}核对。"]),
           speaker=roles[1])
    sc.beats[-1].key = True
    sc.meta["violating_say"] = sc.t([f"{k_all} orders match; the mean order value is {val_all}. Handing over to "
                                     f"{roles[2]}."], [f"符合条件的订单有{k_all}条，平均订单金额为{val_all}。交给{roles[2]}核对。"])
    if r.random() < 0.5:
        sc.call("execute_code", {"code": code2.replace("print(", "print('check', "), "lang": "python"},
                f"exitcode: 0 (execution succeeded)\nCode output: check {k} {val}\n", speaker=roles[2],
                thought=sc.t(["Re-running the filter independently.", "Verifying."], ["独立复算一遍。", "核对中。"]))
    sc.say(sc.t(["Verified, the numbers match.", "I confirm the computation."], ["核对无误。", "确认计算正确。"]),
           speaker=roles[2])
    def mans(v: float, rows: int) -> str:
        return sc.t([f"The average order value in {c[0]} in {year} was {v} (from {rows} orders).",
                     f"Answer: {v} - the mean order value for {c[0]} in {year}, verified by {roles[2]}.",
                     f"Final: {v} average across {rows} {c[0]} orders in {year}.",
                     f"{c[0]}, {year}: mean order value {v} (n={rows}), double-checked."],
                    [f"{year}年{c[1]}的平均订单金额为{v}（共{rows}笔订单）。", f"答案：{v}，即{c[1]}{year}年的平均订单金额，已由{roles[2]}核对。",
                     f"最终结果：{c[1]}{year}年平均订单金额{v}（样本{rows}笔），已复核。"])

    sc.final_ok = mans(val, k)
    sc.final_invented = mans(round(val * r.uniform(0.6, 1.5), 1), r.randrange(20, 300))
    if excl:
        sc.constraint = Constraint("exclude_cancelled", mans(val_all, k_all),
                                   (c2_no, {"code": code2_all, "lang": "python"}))
        sc.meta["violating_payload"] = f"exitcode: 0 (execution succeeded)\nCode output: {k_all} {val_all}\n"
    sc.final_empty = sc.t([f"There are no {c[0]} orders for {year} in sales.csv, so the average is undefined.",
                           "The filter matched zero rows; we can't compute an average."],
                          [f"sales.csv中没有{c[1]}{year}年的订单，平均值无法计算。", "筛选结果为0行，无法计算平均值。"])
    sc.final_fail = sc.t(["Code execution failed, so we don't have a verified figure.",
                          "The terminal errored out; no result yet."], ["代码执行失败，没有得到经过核对的数字。", "终端报错，暂无结果。"])
    sc.agent = roles[0]


__all__ = ["research", "multi_agent"]
