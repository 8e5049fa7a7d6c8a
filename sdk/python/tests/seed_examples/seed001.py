# Seed 001's Python example (add_event, search_event_memory, batch_delete_event), verbatim from
# shared/seeds/001 except the host line. Run by tests/test_seed_examples.py.
import json
import os
import time

from vikingdb import APIKey
from vikingdb.memory import VikingMem


def build_client() -> VikingMem:
    api_key = os.getenv("MEMORY_API_KEY")
    if not api_key:
        raise RuntimeError("Missing credentials: set MEMORY_API_KEY")
    auth = APIKey(api_key=api_key)

    return VikingMem(
        host=os.environ["MNEMO_URL"],  # the one change: was "api-knowledgebase.mlp.cn-beijing.volces.com"
        region="cn-beijing",
        auth=auth,
        scheme="http",
    )


def main() -> None:
    client = build_client()

    collection = client.get_collection(collection_name="your_collection", project_name="default")

    now_ms = int(time.time() * 1000)
    user_id = f"sdk_example_user_{now_ms}"
    assistant_id = "sdk_example_assistant"

    try:
        collection.add_event(
            event_type="event_v1",
            user_id=user_id,
            assistant_id=assistant_id,
            memory_info={"summary": "用户说周末想去一家新的咖啡店，想试试手冲咖啡。"},
        )
        collection.add_event(
            event_type="event_v1",
            user_id=user_id,
            assistant_id=assistant_id,
            memory_info={"summary": "用户说最近在学习意式浓缩，并对萃取时间很感兴趣。"},
        )

        time.sleep(5)

        result = collection.search_event_memory(
            query="咖啡店 手冲",
            filter={
                "user_id": user_id,
                "assistant_id": assistant_id,
                "memory_type": ["event_v1"],
            },
            time_decay_config={"weight": 0.2, "no_decay_period": 7},
            limit=10,
        )

        print("search_event_memory response:")
        print(json.dumps(result, indent=2, ensure_ascii=False))
        print("user_id:", user_id)
        print("assistant_id:", assistant_id)
    finally:
        collection.batch_delete_event(
            filter={"user_id": user_id, "event_type": "event_v1"},
            delete_type="full",
        )


if __name__ == "__main__":
    main()
