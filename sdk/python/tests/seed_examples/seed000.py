# Seed 000's Python examples (streaming_write, then get_context), verbatim from
# shared/seeds/000 except the host line. Run by tests/test_seed_examples.py.
import os
from vikingdb.memory import VikingMem
from vikingdb import APIKey

# 推荐从环境变量或安全配置中读取 API Key
API_KEY = os.environ.get("MEMORY_API_KEY", "YOUR_MEMORY_API_KEY")

# 1. 初始化客户端
client = VikingMem(
    host=os.environ["MNEMO_URL"],  # the one change: was "api-knowledgebase.mlp.cn-beijing.volces.com"
    region="cn-beijing",
    auth=APIKey(api_key=API_KEY)
)

# 2. 获取记忆库实例
collection = client.get_collection(
    collection_name="your_collection_name",
    project_name="default"
)

# 3. 实时写入对话
def streaming_write_message():
    try:
        result = collection.streaming_write(
            conversation_id="conv_20260330_user123_xyz",
            messages=[
                {
                    "role": "user",
                    "content": "我家宝宝1岁，最近喝奶粉总胀气，有没有推荐的？"
                },
                {
                    "role": "assistant",
                    "content": "您好，宝宝胀气大概率和奶粉乳糖含量有关，建议优先选择无乳糖配方奶粉。"
                }
            ],
            extract_trigger={
                "token_count": 1000,
                "message_count": 20,
                "wait_timeout": 604800
            },
            metadata={
                "user_id": "user_123",
                "source": "app_chat"
            }
        )
        print(f"写入成功: {result}")
        return result
    except Exception as e:
        print(f"写入失败: {e}")
        # 在此添加重试或错误上报逻辑
        return None

# ... (接上文的 client 和 collection 初始化)

# 4. 获取长短期记忆上下文
def get_memory_context():
    try:
        context_response = collection.get_context(
            conversation_id="conv_20260330_user123_xyz",
            project_name="default",
            query="除了无乳糖，还有没有含DHA的推荐？",
            event_search_config={
                "filter": {"user_id": "user_123"},
                "limit": 5,
                "time_decay_config": {"weight": 0.6, "no_decay_period": 3}
            },
            profile_search_config={
                "filter": {"user_id": "user_123"},
                "limit": 1
            }
        )
        # 直接获取拼接好的字符串
        prompt_context = context_response.context_str
        print("------ 拼接好的 Prompt 上下文 ------")
        print(prompt_context)
        
        # 也可以访问结构化的记忆内容
        # print("------ 短期记忆 ------")
        # for msg in context_response.short_term_memory:
        #     print(msg)

        return prompt_context
    except Exception as e:
        print(f"获取上下文失败: {e}")
        # 异常处理：可以返回一个空的上下文或默认兜底文案
        return ""

if __name__ == "__main__":
    # 完整流程：写入 -> 获取上下文
    streaming_write_message()
    get_memory_context()
